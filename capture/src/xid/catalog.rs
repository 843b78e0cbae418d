//! The Xid catalogue: Xid number → what it means and what to do, from `catalog.tsv` (its header names the
//! NVIDIA pages it was written from). Parsed once, on first use; a malformed row is a test failure, not a panic
//! at run time (it is skipped).

use std::sync::OnceLock;

/// The table as shipped.
const TABLE: &str = include_str!("catalog.tsv");

/// One row of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub xid: u32,
    /// What the Xid means, in a few words.
    pub meaning: &'static str,
    /// What to do (NVIDIA's immediate resolution, in words).
    pub action: &'static str,
}

/// Rows of `text` (pure): `#` lines and blank lines skipped, a row with the wrong number of fields or a bad
/// number skipped.
pub fn parse(text: &'static str) -> Vec<Entry> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split('\t');
            let xid = fields.next()?.trim().parse().ok()?;
            let meaning = fields.next()?.trim();
            let action = fields.next()?.trim();
            (fields.next().is_none() && !meaning.is_empty() && !action.is_empty()).then_some(
                Entry {
                    xid,
                    meaning,
                    action,
                },
            )
        })
        .collect()
}

/// Every row, by Xid number.
pub fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| parse(TABLE))
}

/// The row of `xid`, if the catalogue has one.
pub fn lookup(xid: u32) -> Option<&'static Entry> {
    entries().iter().find(|e| e.xid == xid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_shipped_table_parses_once_and_in_order() {
        let rows = TABLE
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        let entries = entries();
        assert_eq!(entries.len(), rows, "a malformed row in catalog.tsv");
        assert!(entries.windows(2).all(|w| w[0].xid < w[1].xid));
    }

    #[test]
    fn the_common_xids_are_there() {
        for xid in [
            13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 154,
        ] {
            assert!(lookup(xid).is_some(), "Xid {xid} missing from catalog.tsv");
        }
        assert_eq!(lookup(79).unwrap().meaning, "GPU has fallen off the bus");
        assert!(lookup(79).unwrap().action.contains("reboot the node"));
        assert_eq!(lookup(99_999), None);
    }

    #[test]
    fn malformed_rows_are_skipped() {
        let rows = parse("# c\n\n1\tok\tdo\nx\tbad\tnumber\n2\tmissing action\n3\ta\tb\tc\n");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].xid, 1);
    }
}

#[cfg(test)]
mod doc_tests {
    /// docs/xid.md's table of common Xids is the catalogue's rows, word for word.
    #[test]
    fn the_docs_table_is_the_catalogue() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/xid.md"))
            .unwrap();
        let mut rows = 0;
        for line in doc
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| Xid"))
        {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let xid: u32 = cells[0].parse().unwrap_or_else(|_| panic!("{line}"));
            let entry =
                super::lookup(xid).unwrap_or_else(|| panic!("Xid {xid} not in catalog.tsv"));
            assert_eq!(
                (cells[1], cells[2]),
                (entry.meaning, entry.action),
                "{line}"
            );
            rows += 1;
        }
        assert!(rows >= 20, "{rows} rows");
    }
}
