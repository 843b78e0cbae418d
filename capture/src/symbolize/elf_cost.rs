//! What an ELF file will cost the symbolizer, from its headers alone ([`elf_cost`]): the ELF header, the
//! section headers and the section names are read, never a table; 32- and 64-bit, either byte order.

/// What an ELF file will cost the symbolizer, from its headers alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfCost {
    /// Bytes of `.symtab` and `.dynsym` (by name, as the symbolizer finds them, or by type).
    pub symbol_table_bytes: u64,
    pub sections: u64,
}

/// Most section headers read (`SHN_LORESERVE`: beyond it the count lives elsewhere, and no real file has
/// that many); most bytes of the section-name table read.
const MAX_SECTIONS: u64 = 0xff00;
const MAX_SECTION_NAMES: u64 = 1 << 20;
/// Section types of a symbol table (`SHT_SYMTAB`, `SHT_DYNSYM`).
pub(super) const SHT_SYMTAB: u32 = 2;
pub(super) const SHT_DYNSYM: u32 = 11;

/// Reads `buf.len()` bytes at an offset of the file, failing short of it.
type ReadAt<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>;

/// The cost of the ELF file behind `read_at` (reads `buf.len()` bytes at an offset, failing short of it),
/// read cheaply: the ELF header, the section headers and the section names, never a table. 32- and 64-bit,
/// either byte order. An error says why the file is not one to parse.
pub fn elf_cost(read_at: ReadAt<'_>) -> std::result::Result<ElfCost, String> {
    let table = SectionTable::read(read_at)?;
    if table.shoff == 0 {
        return Ok(ElfCost {
            symbol_table_bytes: 0,
            sections: 0,
        });
    }
    let entry = table.layout.entry();
    if table.shentsize < entry {
        return Err(format!(
            "section headers of {} bytes (at least {entry})",
            table.shentsize
        ));
    }
    let table = table.with_extended_numbering(read_at)?;
    if table.shnum > MAX_SECTIONS {
        return Err(format!("{} sections (at most {MAX_SECTIONS})", table.shnum));
    }
    let names = table.names(read_at)?;
    let mut total = 0u64;
    for index in 1..table.shnum {
        let section = table.section(read_at, index)?;
        let named_table =
            names.is_some_and(|names| names_symbol_table(read_at, names, section.name));
        if named_table || section.kind == SHT_SYMTAB || section.kind == SHT_DYNSYM {
            total = total.saturating_add(section.size);
        }
    }
    Ok(ElfCost {
        symbol_table_bytes: total,
        sections: table.shnum,
    })
}

/// Whether the section name at `name` in the section-name table (offset, bounded length) is `.symtab` or
/// `.dynsym`; an unreadable name is not.
fn names_symbol_table(read_at: ReadAt<'_>, (offset, len): (u64, u64), name: u64) -> bool {
    if name >= len {
        return false;
    }
    let mut text = [0u8; 8];
    let want = (len - name).min(8) as usize;
    if read_at(offset.saturating_add(name), &mut text[..want]).is_err() {
        return false;
    }
    text[..want].starts_with(b".symtab\0")
        || text[..want].starts_with(b".dynsym\0")
        || (want == 7 && (&text[..7] == b".symtab" || &text[..7] == b".dynsym"))
}

/// How the file's numbers are read: its class (32- or 64-bit) and byte order, from `e_ident`.
#[derive(Debug, Clone, Copy)]
struct Layout {
    wide: bool,
    big: bool,
}

impl Layout {
    fn of(ident: &[u8]) -> std::result::Result<Layout, String> {
        let wide = match ident[4] {
            1 => false,
            2 => true,
            _ => return Err("not an ELF file (bad class)".to_string()),
        };
        let big = match ident[5] {
            1 => false,
            2 => true,
            _ => return Err("not an ELF file (bad byte order)".to_string()),
        };
        Ok(Layout { wide, big })
    }

    /// Bytes of the ELF header.
    fn header_len(self) -> usize {
        if self.wide {
            64
        } else {
            52
        }
    }

    /// Bytes of one section header.
    fn entry(self) -> u64 {
        if self.wide {
            64
        } else {
            40
        }
    }

    fn u16_at(self, b: &[u8], at: usize) -> u64 {
        let v = [b[at], b[at + 1]];
        u64::from(if self.big {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        })
    }

    fn u32_at(self, b: &[u8], at: usize) -> u64 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        u64::from(if self.big {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        })
    }

    fn u64_at(self, b: &[u8], at: usize) -> u64 {
        let v: [u8; 8] = b[at..at + 8].try_into().unwrap_or([0; 8]);
        if self.big {
            u64::from_be_bytes(v)
        } else {
            u64::from_le_bytes(v)
        }
    }
}

/// Where the section headers are, from the ELF header: `e_shoff`, `e_shentsize`, `e_shnum`, `e_shstrndx`.
#[derive(Debug, Clone, Copy)]
struct SectionTable {
    layout: Layout,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
}

/// One section header's `sh_name`, `sh_type`, `sh_offset`, `sh_size` and `sh_link`.
struct Section {
    name: u64,
    kind: u32,
    offset: u64,
    size: u64,
    link: u64,
}

impl SectionTable {
    /// The ELF header read and checked (magic, class, byte order), and its section-table fields.
    fn read(read_at: ReadAt<'_>) -> std::result::Result<SectionTable, String> {
        let mut ident = [0u8; 64];
        read_at(0, &mut ident[..16]).map_err(|err| format!("not an ELF file: {err}"))?;
        if &ident[..4] != b"\x7fELF" {
            return Err("not an ELF file".to_string());
        }
        let layout = Layout::of(&ident)?;
        let header_len = layout.header_len();
        read_at(0, &mut ident[..header_len]).map_err(|err| format!("a cut ELF header: {err}"))?;
        let ehdr = &ident[..header_len];
        let l = layout;
        Ok(if layout.wide {
            SectionTable {
                layout,
                shoff: l.u64_at(ehdr, 40),
                shentsize: l.u16_at(ehdr, 58),
                shnum: l.u16_at(ehdr, 60),
                shstrndx: l.u16_at(ehdr, 62),
            }
        } else {
            SectionTable {
                layout,
                shoff: l.u32_at(ehdr, 32),
                shentsize: l.u16_at(ehdr, 46),
                shnum: l.u16_at(ehdr, 48),
                shstrndx: l.u16_at(ehdr, 50),
            }
        })
    }

    /// Extended numbering: the real count and name-table index sit in section 0.
    fn with_extended_numbering(
        mut self,
        read_at: ReadAt<'_>,
    ) -> std::result::Result<SectionTable, String> {
        if self.shnum == 0 || self.shstrndx == 0xffff {
            let first = self.section(read_at, 0)?;
            if self.shnum == 0 {
                self.shnum = first.size;
            }
            if self.shstrndx == 0xffff {
                self.shstrndx = first.link;
            }
        }
        Ok(self)
    }

    /// The section-name table's offset and (bounded) length, if the file has one.
    fn names(&self, read_at: ReadAt<'_>) -> std::result::Result<Option<(u64, u64)>, String> {
        if self.shstrndx < self.shnum && self.shstrndx != 0 {
            let names = self.section(read_at, self.shstrndx)?;
            Ok(Some((names.offset, names.size.min(MAX_SECTION_NAMES))))
        } else {
            Ok(None)
        }
    }

    /// Section header `index`.
    fn section(&self, read_at: ReadAt<'_>, index: u64) -> std::result::Result<Section, String> {
        let entry = self.layout.entry();
        let mut raw = [0u8; 64];
        let at = self
            .shoff
            .checked_add(index.saturating_mul(self.shentsize))
            .ok_or("section headers past the end of any file")?;
        read_at(at, &mut raw[..entry as usize])
            .map_err(|err| format!("a cut section header table: {err}"))?;
        let b = &raw[..entry as usize];
        let l = self.layout;
        Ok(if l.wide {
            Section {
                name: l.u32_at(b, 0),
                kind: l.u32_at(b, 4) as u32,
                offset: l.u64_at(b, 24),
                size: l.u64_at(b, 32),
                link: l.u32_at(b, 40),
            }
        } else {
            Section {
                name: l.u32_at(b, 0),
                kind: l.u32_at(b, 4) as u32,
                offset: l.u32_at(b, 16),
                size: l.u32_at(b, 20),
                link: l.u32_at(b, 24),
            }
        })
    }
}
