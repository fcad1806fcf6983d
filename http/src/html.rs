//! Text for the pages slipway's servers build as strings (the console's, the MCP sign-in's consent page): every
//! value from outside goes through [`escape`] on its way into one, in text or in a `"`-quoted attribute.

/// `text` escaped for HTML text and attribute values (quoted with `"`).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_both_quotes_are_escaped_and_the_rest_kept() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a> ü"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt; ü"
        );
        assert_eq!(escape(""), "");
    }
}
