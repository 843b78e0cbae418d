//! The one loader of the generated decode tables (`capture/data/*.tsv`): tab-separated rows, `#` lines are
//! the source/version header or comments, and a table may start with one column-header row (named by its
//! first column) that is not data.

/// A generated table compiled into the binary.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub text: &'static str,
    /// The first column's name in the column-header row (`nr`, `cmd`, `device`, …), skipped as data.
    pub first_column: &'static str,
}

impl Table {
    pub const fn new(text: &'static str, first_column: &'static str) -> Table {
        Table { text, first_column }
    }

    /// Data rows split on tabs, each at least `min_columns` wide: comments, blank lines and the
    /// column-header row skipped.
    pub fn rows(self, min_columns: usize) -> impl Iterator<Item = Vec<&'static str>> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split('\t').collect::<Vec<_>>())
            .filter(move |c| c.len() >= min_columns && c[0].trim() != self.first_column)
    }

    /// The first line: where the table comes from (source, version, generator).
    pub fn source(self) -> &'static str {
        self.text.lines().next().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_comments_blank_lines_the_column_header_and_short_rows() {
        let t = Table::new(
            "# source: x\nnr\tname\n1\tread\n\n# note\n2\twrite\n3\n",
            "nr",
        );
        let rows: Vec<_> = t.rows(2).collect();
        assert_eq!(rows, vec![vec!["1", "read"], vec!["2", "write"]]);
        assert_eq!(t.source(), "# source: x");
        // A `#`-prefixed column header is a comment like any other.
        let t = Table::new("# src\n# nr\tname\n7\tx\n", "nr");
        assert_eq!(t.rows(2).count(), 1);
    }
}
