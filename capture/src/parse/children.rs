//! `task/<tid>/children`: space-separated pids of the thread's children (pure parser). Words that are
//! not a positive pid are skipped: the file is advisory (CONFIG_PROC_CHILDREN) and a fake tree may lie.

pub fn parse(bytes: &[u8]) -> impl Iterator<Item = i32> + '_ {
    bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|word| !word.is_empty() && word.len() <= 10)
        .filter_map(|word| std::str::from_utf8(word).ok()?.parse::<i32>().ok())
        .filter(|&pid| pid > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_and_garbage() {
        assert_eq!(
            parse(b"12 345 6789 \n").collect::<Vec<_>>(),
            [12, 345, 6789]
        );
        assert_eq!(parse(b"").count(), 0);
        assert_eq!(parse(b"x -1 0 99999999999 7").collect::<Vec<_>>(), [7]);
    }
}
