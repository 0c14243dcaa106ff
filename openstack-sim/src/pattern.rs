//! `*` wildcard matching for host names in scenarios and request paths in fault rules.

/// True when `text` matches `pattern`, where `*` stands for any run of characters (also `/`).
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    #[test]
    fn matches_literals_and_stars() {
        assert!(wildcard_match("/servers/detail", "/servers/detail"));
        assert!(!wildcard_match("/servers/detail", "/servers/details"));
        assert!(wildcard_match("/servers/*/action", "/servers/abc/action"));
        assert!(!wildcard_match(
            "/servers/*/action",
            "/servers/abc/os-volume_attachments"
        ));
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("compute-*", "compute-17"));
        assert!(wildcard_match("*-0*", "compute-07"));
        assert!(!wildcard_match("compute-1*", "compute-07"));
        assert!(wildcard_match("/a*b*c", "/axxbyyc"));
    }
}
