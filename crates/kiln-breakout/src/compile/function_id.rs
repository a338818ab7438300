//! Function ids (`lib/users.js#1`, `init:lib/users.js`) and the package file each belongs to.

/// The package file a function id (`lib/users.js#1`, `init:lib/users.js`) belongs to.
pub fn file_of(function: &str) -> &str {
    match function.strip_prefix("init:") {
        Some(file) => file,
        None => function.rsplit_once('#').map_or(function, |(file, _)| file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_id_names_its_file() {
        assert_eq!(file_of("init:lib/users.js"), "lib/users.js");
        assert_eq!(file_of("lib/users.js#3"), "lib/users.js");
        assert_eq!(file_of("a#b.js#1"), "a#b.js");
    }
}
