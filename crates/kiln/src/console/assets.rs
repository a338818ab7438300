//! The console's files, compiled into the binary: nothing is fetched at run time, and the
//! console works offline. One page (`index.html`), its script as ES modules and one
//! stylesheet; no build step, so what is in `assets/` is what the browser gets.

/// One embedded file.
pub struct Asset {
    pub body: &'static [u8],
    pub content_type: &'static str,
}

/// The page every console URL answers with (the script picks the view).
pub const INDEX: Asset = Asset {
    body: include_bytes!("assets/index.html"),
    content_type: "text/html; charset=utf-8",
};

/// The files under `/ui/assets/`, by name.
const FILES: &[(&str, Asset)] = &[
    (
        "app.js",
        Asset {
            body: include_bytes!("assets/app.js"),
            content_type: "text/javascript; charset=utf-8",
        },
    ),
    (
        "dom.js",
        Asset {
            body: include_bytes!("assets/dom.js"),
            content_type: "text/javascript; charset=utf-8",
        },
    ),
    (
        "function.js",
        Asset {
            body: include_bytes!("assets/function.js"),
            content_type: "text/javascript; charset=utf-8",
        },
    ),
    (
        "objects.js",
        Asset {
            body: include_bytes!("assets/objects.js"),
            content_type: "text/javascript; charset=utf-8",
        },
    ),
    (
        "style.css",
        Asset {
            body: include_bytes!("assets/style.css"),
            content_type: "text/css; charset=utf-8",
        },
    ),
    (
        "kiln.svg",
        Asset {
            body: include_bytes!("assets/kiln.svg"),
            content_type: "image/svg+xml",
        },
    ),
];

/// The embedded file called `name`, if there is one.
pub fn asset(name: &str) -> Option<&'static Asset> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str) -> &'static str {
        std::str::from_utf8(asset(name).unwrap().body).unwrap()
    }

    #[test]
    fn every_embedded_file_is_used() {
        let page = std::str::from_utf8(INDEX.body).unwrap();
        let scripts: String = FILES
            .iter()
            .filter(|(name, _)| name.ends_with(".js"))
            .map(|(name, _)| text(name))
            .collect();
        for (name, _) in FILES {
            assert!(
                page.contains(&format!("/ui/assets/{name}"))
                    || scripts.contains(&format!("from \"./{name}\"")),
                "nothing loads {name}"
            );
        }
        assert!(asset("app.js").is_some());
        assert!(asset("../mod.rs").is_none() && asset("").is_none());
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        // The Content-Security-Policy allows neither; a slip would only show in a browser.
        let page = std::str::from_utf8(INDEX.body).unwrap();
        assert!(!page.contains("<script>") && !page.contains("style="));
        let handler = regex_lite::Regex::new(r"\son[a-z]+\s*=").unwrap();
        assert!(
            !handler.is_match(page),
            "index.html has an inline event handler"
        );
        for (name, file) in FILES.iter().filter(|(name, _)| name.ends_with(".js")) {
            let script = std::str::from_utf8(file.body).unwrap();
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!script.contains(banned), "{name} uses {banned}");
            }
        }
    }
}
