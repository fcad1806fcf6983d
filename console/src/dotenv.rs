//! A pasted `.env` file read into variables, all checked before the first is saved, so a typo on line 30 saves
//! nothing rather than the 29 lines above it. It reads what `.env` files hold in practice: `KEY=value`, an
//! optional `export `, `#` comments, blank lines, and values unquoted, in single quotes (taken as written) or in
//! double quotes (with `\n`, `\t`, `\"` and `\\` escapes), quoted ones across lines (a PEM key).
//!
//! Nothing is expanded: `$HOME` and `${DATABASE_URL}` stay as typed. The parsers that expand such references fill
//! in the ones the file does not define from their own process's environment, which here is the platform's.

use std::collections::HashMap;

use slipway_crds::names::{EnvKey, InvalidEnvKey};
use slipway_store::env::MAX_VALUE_BYTES;

/// Variables one paste may set.
pub const MAX_ENTRIES: usize = 200;

/// One variable of the file.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name, checked as the API checks one.
    pub key: String,
    /// Its value, unquoted.
    pub value: String,
}

/// The variables of `text` in file order, or what is wrong with it, naming the line.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut first_line: HashMap<String, usize> = HashMap::new();
    let mut rest = text;
    let mut line = 0;
    while !rest.is_empty() {
        line += 1;
        let (current, after) = rest.split_once('\n').unwrap_or((rest, ""));
        rest = after;
        let current = current.trim_end_matches('\r').trim();
        if current.is_empty() || current.starts_with('#') {
            continue;
        }
        let current = current.strip_prefix("export ").unwrap_or(current);
        let Some((key, value)) = current.split_once('=') else {
            return Err(format!("Line {line}: expected KEY=value."));
        };
        let key = key.trim();
        key.parse::<EnvKey>().map_err(|e| match e {
            InvalidEnvKey::Format => {
                format!("Line {line}: {key} is not a name a variable may have: {e}.")
            }
            reserved => format!("Line {line}: {reserved}."),
        })?;
        let start = line;
        let value = match value.trim_start().chars().next() {
            Some(quote @ ('"' | '\'')) => {
                // The value may run on over the next lines: everything up to its closing quote.
                let opened = value.trim_start();
                let whole = format!("{opened}\n{rest}");
                let (value, used, tail) = quoted(&whole[1..], quote).ok_or_else(|| {
                    format!("Line {start}: the value's {quote} quote is never closed.")
                })?;
                let tail = tail.trim();
                if !(tail.is_empty() || tail.starts_with('#')) {
                    return Err(format!(
                        "Line {start}: only a comment may follow the quoted value."
                    ));
                }
                // Skip the lines the value took beyond its first.
                let spanned = whole[..1 + used].matches('\n').count();
                for _ in 0..spanned {
                    line += 1;
                    rest = rest.split_once('\n').map_or("", |(_, after)| after);
                }
                value
            }
            _ => {
                let value = value.trim();
                // An unquoted value ends at a comment, which a space opens.
                value
                    .find(" #")
                    .map_or(value, |at| value[..at].trim_end())
                    .to_owned()
            }
        };
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "Line {start}: the value of {key} is over {} KiB.",
                MAX_VALUE_BYTES / 1024
            ));
        }
        if let Some(first) = first_line.insert(key.to_owned(), start) {
            return Err(format!(
                "Line {start}: {key} is set again (first on line {first})."
            ));
        }
        entries.push(Entry {
            key: key.to_owned(),
            value,
        });
        if entries.len() > MAX_ENTRIES {
            return Err(format!(
                "The file sets over {MAX_ENTRIES} variables; paste it in parts."
            ));
        }
    }
    if entries.is_empty() {
        return Err("The file sets no variable.".into());
    }
    Ok(entries)
}

/// The value at the start of `text`, just after its opening `quote`: the value, the bytes of `text` up to and
/// including its closing quote, and what follows that quote on its line; `None` when it is never closed.
fn quoted(text: &str, quote: char) -> Option<(String, usize, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c == quote => {
                let end = at + c.len_utf8();
                let tail = text[end..].split('\n').next().unwrap_or("");
                return Some((value, end, tail));
            }
            '\\' if quote == '"' => match chars.next()?.1 {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'r' => value.push('\r'),
                other => value.push(other),
            },
            // A line break inside quotes is part of the value, without a carriage return before it.
            '\r' => {}
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect()
    }

    #[test]
    fn the_usual_shapes_of_a_dotenv_file_are_read() {
        let text = "# settings\r\nPLAIN=value\r\n\nexport EXPORTED = spaced out  # a comment\nEMPTY=\nHASH=a#b\nSINGLE='$HOME \\n stays'\nDOUBLE=\"line\\none \\\"q\\\"\" # note\nKEY_PEM=\"-----BEGIN-----\nabc\n-----END-----\"\nAFTER=${DATABASE_URL}\n";
        assert_eq!(
            pairs(text),
            [
                ("PLAIN", "value"),
                ("EXPORTED", "spaced out"),
                ("EMPTY", ""),
                ("HASH", "a#b"),
                ("SINGLE", "$HOME \\n stays"),
                ("DOUBLE", "line\none \"q\""),
                ("KEY_PEM", "-----BEGIN-----\nabc\n-----END-----"),
                ("AFTER", "${DATABASE_URL}"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn a_mistake_names_its_line_and_nothing_is_taken() {
        let wrong = |text: &str| parse(text).unwrap_err();
        assert_eq!(wrong("A=1\njust words\n"), "Line 2: expected KEY=value.");
        assert!(
            wrong("A=1\nlower=2\n").starts_with("Line 2: "),
            "{}",
            wrong("A=1\nlower=2\n")
        );
        assert!(
            wrong("PORT=80\n").contains("PORT is reserved"),
            "{}",
            wrong("PORT=80\n")
        );
        assert_eq!(
            wrong("A=1\nB=\"open\nstill open\n"),
            "Line 2: the value's \" quote is never closed."
        );
        assert_eq!(
            wrong("A=\"x\" y\n"),
            "Line 1: only a comment may follow the quoted value."
        );
        // A line number after a value across lines counts the lines it took.
        assert_eq!(
            wrong("A=\"1\n2\n3\"\nB=1\nB=2\n"),
            "Line 5: B is set again (first on line 4)."
        );
        assert!(wrong(&format!("A={}\n", "x".repeat(MAX_VALUE_BYTES + 1))).contains("over 16 KiB"));
        assert_eq!(wrong("# nothing\n\n"), "The file sets no variable.");
        let many: String = (0..=MAX_ENTRIES).map(|i| format!("K{i}=v\n")).collect();
        assert!(wrong(&many).contains("over 200 variables"));
    }
}
