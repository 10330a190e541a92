//! The docs as a reader meets them: every relative link and `#anchor` in the book
//! (`docs/src`) and the repository's own Markdown resolves (read as mdBook reads Markdown),
//! every page is in the book's table of contents, the README's quick start is the
//! getting-started page's commands, the build-from-source commands name what exists, the
//! security page shows every role of the SAM template with its policies, the CLI reference
//! keeps the exit codes in lines and the built book every `--flag` as typed, and the config
//! schema is named by path. (The figures are held by ballast-cli's tests, the
//! getting-started commands by `rehearsal.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ballast_tests::moto::required;
use ballast_tests::templates::{rendered, Variant, ACCOUNT, REGION};
use ballast_tests::{cache_dir, repo_root};
use pulldown_cmark::{BrokenLink, Event, LinkType, Options, Parser, Tag, TagEnd};
use serde_json::Value;

/// Markdown outside the book that links into it or beside it.
const REPO_PAGES: [&str; 3] = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"];

fn book_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&repo_root().join("docs/src"), &mut pages);
    pages.sort();
    pages
}

/// The parser options mdBook 0.5 reads a page with (`mdbook-markdown`'s, smart punctuation
/// aside, which changes no link or heading id).
fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM
}

/// A page's links as the Markdown parser reads them: each link or image target (inline,
/// reference-style `[text][ref]` with its `[ref]: target`, autolinks), in order, and each
/// explicit reference (`[text][ref]`, `[text][]`) that has no definition, which mdBook
/// prints as plain text. Code, in spans or blocks, holds no link.
struct Links {
    targets: Vec<String>,
    undefined: Vec<String>,
}

fn links(markdown: &str) -> Links {
    let undefined = std::cell::RefCell::new(Vec::new());
    // A shortcut `[text]` with no definition is ordinary text (`[Unreleased]`, `[0, 1]`).
    let callback = |broken: BrokenLink<'_>| {
        if matches!(broken.link_type, LinkType::Reference | LinkType::Collapsed) {
            undefined.borrow_mut().push(broken.reference.to_string());
        }
        None
    };
    let targets = Parser::new_with_broken_link_callback(markdown, markdown_options(), Some(callback))
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
            _ => None,
        })
        .collect();
    Links { targets, undefined: undefined.into_inner() }
}

/// Each link or image target of a page.
fn link_targets(markdown: &str) -> Vec<String> {
    links(markdown).targets
}

/// The anchors mdbook gives a page's headings: an explicit `{#id}`, or the heading's text
/// without its Markdown, lower-cased, whitespace to `-`, other punctuation dropped; a
/// repeated one gets `-1`, `-2`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<(Option<String>, String)> = None;
    for event in Parser::new_ext(markdown, markdown_options()) {
        match (event, heading.as_mut()) {
            (Event::Start(Tag::Heading { id, .. }), _) => heading = Some((id.map(|id| id.to_string()), String::new())),
            (Event::Text(text) | Event::Code(text), Some((_, heading_text))) => heading_text.push_str(&text),
            (Event::SoftBreak | Event::HardBreak, Some((_, heading_text))) => heading_text.push(' '),
            (Event::End(TagEnd::Heading(_)), _) => {
                let Some((explicit, text)) = heading.take() else { continue };
                let id = explicit.unwrap_or_else(|| heading_id(&text));
                let n = seen.entry(id.clone()).or_insert(0);
                out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// mdBook's id for a heading's text (`mdbook-html`'s `id_from_content`).
fn heading_id(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// What is wrong with each relative link of `page`: a file that does not exist, an anchor
/// its target page has no heading for, or (from a page of the book) a file outside the
/// book, which mdbook does not publish.
fn broken_links(page: &Path, markdown: &str) -> Vec<String> {
    let dir = page.parent().unwrap();
    let book = repo_root().join("docs/src");
    let in_book = page.starts_with(&book);
    let Links { targets, undefined } = links(markdown);
    let mut broken: Vec<String> =
        undefined.iter().map(|r| format!("[{r}]: a reference with no `[{r}]: target` definition")).collect();
    for target in targets {
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() { page.to_path_buf() } else { dir.join(path) };
        if !file.exists() {
            broken.push(format!("{target}: no file {}", file.display()));
            continue;
        }
        let outside = file.canonicalize().is_ok_and(|f| !f.starts_with(book.canonicalize().unwrap()));
        if in_book && outside {
            broken.push(format!("{target}: outside docs/src, not in the built book (link the repository or use code)"));
            continue;
        }
        if let Some(anchor) = anchor {
            if file.extension().is_none_or(|e| e != "md") {
                broken.push(format!("{target}: an anchor into a file that is not Markdown"));
                continue;
            }
            let text = if path.is_empty() { markdown.to_string() } else { std::fs::read_to_string(&file).unwrap() };
            if !anchors(&text).contains(anchor) {
                broken.push(format!("{target}: {} has no heading `#{anchor}`", file.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = repo_root();
    let mut pages = book_pages();
    pages.extend(REPO_PAGES.iter().map(|p| root.join(p)));
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for problem in broken_links(page, &text) {
            problems.push(format!("{}: {problem}", page.strip_prefix(&root).unwrap_or(page).display()));
        }
    }
    assert!(pages.len() > 10, "the book's pages: {pages:?}");
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn the_link_check_catches_a_missing_page_and_a_missing_anchor() {
    let page = repo_root().join("docs/src/faq.md");
    let sample = "# A\n\n## Why not this?\n\n[ok](#why-not-this) [here](faq.md#why-not-karpenter) [gone](nowhere.md) \
                  [no heading](operations.md#no-such-heading) [out](../../README.md) [web](https://example.com/x#y) \
                  `[in code](missing.md)`\n\n```\n[in a block](missing.md)\n```\n";
    let broken = broken_links(&page, sample);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].starts_with("nowhere.md: no file"), "{broken:#?}");
    assert!(broken[1].contains("has no heading `#no-such-heading`"), "{broken:#?}");
    assert!(broken[2].starts_with("../../README.md: outside docs/src"), "{broken:#?}");
    // The README may link any file of the repository.
    assert!(broken_links(&repo_root().join("README.md"), "[ok](ballast.example.yaml)").is_empty());
    // As mdbook makes them: code and punctuation dropped, repeats numbered, an explicit id kept.
    let ids = anchors(
        "## Asking Ballast about one event: `ballast plan`\n### **Options:**\n### **Options:**\n\
         ## Renamed {#kept}\n\nSetext `heading`\n---\n",
    );
    assert_eq!(
        ids,
        BTreeSet::from([
            "asking-ballast-about-one-event-ballast-plan".into(),
            "options".into(),
            "options-1".into(),
            "kept".into(),
            "setext-heading".into()
        ])
    );
}

/// Links a line-by-line reading misses: a code span in the link text split over two lines,
/// reference-style links (their definitions anywhere on the page), a reference that names
/// no definition, and an autolink; and text that only looks like a link.
#[test]
fn the_link_check_reads_links_as_markdown_does() {
    let page = repo_root().join("docs/src/faq.md");
    let sample = "See [the `ballast config\ncheck` command](split-code.md) and\n\
                  [the `config\ncheck` page](reference/config.md#keys).\n\n\
                  Read [operations][ops], [the FAQ][faq], [again][faq] and [gone][] or [nothing][undefined].\n\n\
                  A shortcut [Unreleased] and an array [0, 1] are text; so is `[code][ref]`.\n\n\
                  <https://example.com/x>\n\n\
                  [ops]: operations.md#no-such-heading\n[faq]: faq.md\n[gone]: reference/gone.md\n";
    let found = link_targets(sample);
    assert_eq!(
        found,
        [
            "split-code.md",
            "reference/config.md#keys",
            "operations.md#no-such-heading",
            "faq.md",
            "faq.md",
            "reference/gone.md",
            "https://example.com/x"
        ],
        "{found:#?}"
    );
    let broken = broken_links(&page, sample);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(broken[0].starts_with("[undefined]: a reference with no"), "{broken:#?}");
    assert!(broken[1].starts_with("split-code.md: no file"), "{broken:#?}");
    assert!(broken[2].contains("has no heading `#no-such-heading`"), "{broken:#?}");
    assert!(broken[3].starts_with("reference/gone.md: no file"), "{broken:#?}");
}

#[test]
fn every_page_of_the_book_is_in_its_table_of_contents() {
    let src = repo_root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = link_targets(&summary).into_iter().collect();
    let missing: Vec<String> = book_pages()
        .iter()
        .map(|p| p.strip_prefix(&src).unwrap().to_string_lossy().into_owned())
        .filter(|p| p != "SUMMARY.md" && !listed.contains(p))
        .collect();
    assert!(missing.is_empty(), "pages not in docs/src/SUMMARY.md: {missing:?}");
}

/// Each command of a page's `sh` blocks, its continued lines joined, whitespace collapsed.
fn sh_commands(markdown: &str, within: Option<&str>) -> Vec<String> {
    let text = match within {
        Some(heading) => {
            let start = markdown.find(heading).unwrap_or_else(|| panic!("no section {heading}"));
            let section = &markdown[start + heading.len()..];
            &section[..section.find("\n## ").unwrap_or(section.len())]
        }
        None => markdown,
    };
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("```") {
            in_sh = !in_sh && line == "```sh";
            continue;
        }
        if !in_sh || line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(&format!("{head} ")),
            None => {
                current.push_str(line);
                commands.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                current.clear();
            }
        }
    }
    commands
}

/// The README's quick start quotes the getting-started page, which the rehearsal runs as
/// written: each command it shows is one of the page's.
#[test]
fn the_readme_quick_start_runs_the_getting_started_commands() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let guide = std::fs::read_to_string(root.join("docs/src/getting-started.md")).unwrap();
    let quick = sh_commands(&readme, Some("\n## Quick start"));
    let rehearsed: BTreeSet<String> = sh_commands(&guide, None).into_iter().collect();
    assert!(quick.len() >= 4, "the quick start's commands: {quick:?}");
    let unrehearsed: Vec<&String> = quick.iter().filter(|c| !rehearsed.contains(*c)).collect();
    assert!(unrehearsed.is_empty(), "README quick-start commands not on the getting-started page: {unrehearsed:#?}");
}

/// A role's policies as one document, in the page's terms: the test deployment's account,
/// region, cluster (`test`) and table written as placeholders.
fn as_documented(statements: Vec<Value>) -> Value {
    fn placeholders(v: Value) -> Value {
        match v {
            Value::String(s) => {
                let s = s
                    .replace(ACCOUNT, "ACCOUNT")
                    .replace(REGION, "REGION")
                    .replace(ballast_tests::aws::TABLE, "STATE_TABLE")
                    .replace("ballast-test-", "ballast-CLUSTER-")
                    .replace("ballast-test", "ballast-CLUSTER")
                    .replace("cluster/test", "cluster/CLUSTER")
                    .replace("/ballast/test/", "/ballast/CLUSTER/");
                Value::String(if s == ballast_tests::aws::CLUSTER { "CLUSTER".into() } else { s })
            }
            Value::Array(a) => Value::Array(a.into_iter().map(placeholders).collect()),
            Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, placeholders(v))).collect()),
            other => other,
        }
    }
    placeholders(serde_json::json!({ "Version": "2012-10-17", "Statement": statements }))
}

/// The JSON block after `<!-- iam: NAME -->` on the security page, if there is one.
fn documented_policy(page: &str, name: &str) -> Option<Result<Value, String>> {
    let marker = format!("<!-- iam: {name} -->\n```json\n");
    let start = page.find(&marker)? + marker.len();
    let end = page[start..].find("\n```").map_or(page.len(), |end| start + end);
    Some(serde_json::from_str(&page[start..end]).map_err(|e| format!("the `{name}` block is not JSON: {e}")))
}

/// The names of the page's `<!-- iam: NAME -->` blocks.
fn documented_roles(page: &str) -> BTreeSet<String> {
    page.split("<!-- iam: ")
        .skip(1)
        .filter_map(|rest| rest.split_once(" -->"))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The name a role goes by on the security page: its `RoleName` without `ballast-CLUSTER-`
/// (`interruption`), or for a role CloudFormation names, its logical id without `Role`,
/// in kebab case (`ForwarderRole`: `forwarder`).
fn page_name(logical_id: &str, role_name: Option<&str>) -> String {
    let prefix = format!("ballast-{}-", ballast_tests::aws::CLUSTER);
    if let Some(name) = role_name.and_then(|n| n.strip_prefix(&prefix)) {
        return name.to_string();
    }
    let base = logical_id.strip_suffix("Role").unwrap_or(logical_id);
    let mut out = String::new();
    for (i, c) in base.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// What differs between the security page and the template's roles: every role of the
/// template has its block, showing the policies it is granted, and every block is a role.
fn security_page_problems(template: &ballast_tests::templates::Template, page: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut named = BTreeSet::new();
    for (id, role) in template.of_kind("AWS::IAM::Role") {
        let role_name = role.properties["RoleName"].as_str();
        let name = page_name(id, role_name);
        named.insert(name.clone());
        let statements: Vec<Value> = template
            .role_policies(role_name.unwrap_or(id))
            .into_iter()
            .flat_map(|(_, document)| document["Statement"].as_array().cloned().unwrap_or_default())
            .collect();
        let granted = as_documented(statements);
        let shown = serde_json::to_string_pretty(&granted).unwrap();
        match documented_policy(page, &name) {
            None => problems.push(format!("{id}: no `<!-- iam: {name} -->` block; as granted:\n{shown}")),
            Some(Err(e)) => problems.push(format!("{id}: {e}")),
            Some(Ok(documented)) if documented != granted => {
                problems.push(format!("{id} (`{name}`) differs; as granted:\n{shown}"))
            }
            Some(Ok(_)) => {}
        }
    }
    for extra in documented_roles(page).difference(&named) {
        problems.push(format!("`<!-- iam: {extra} -->`: no such role in the template"));
    }
    problems
}

#[test]
fn the_security_page_shows_each_roles_policies() {
    let Some(template) = rendered(Variant::Sam) else { return };
    let page = std::fs::read_to_string(repo_root().join("docs/src/security.md")).unwrap();
    assert!(template.of_kind("AWS::IAM::Role").count() >= 5, "the template's roles");
    let problems = security_page_problems(&template, &page);
    assert!(problems.is_empty(), "docs/src/security.md differs from infra/sam/template.yaml:\n{}", problems.join("\n"));
    // A role without its block, or a block without its role, is caught.
    let (first, _) = template.of_kind("AWS::IAM::Role").next().unwrap();
    let name = page_name(first, template.resources[first].properties["RoleName"].as_str());
    let without = page.replace(&format!("<!-- iam: {name} -->"), "<!-- iam: retired -->");
    let caught = security_page_problems(&template, &without);
    assert_eq!(caught.len(), 2, "{caught:#?}");
    assert!(caught[0].contains(&format!("no `<!-- iam: {name} -->` block")), "{caught:#?}");
    assert!(caught[1].contains("`<!-- iam: retired -->`: no such role"), "{caught:#?}");
}

/// Each paragraph outside lists, quotes and tables whose source lays text out in columns: a
/// line after its first indented by two spaces or more, which Markdown joins into the line
/// before (`ballast --help`'s exit-code table, written as prose). By the paragraph's first line.
fn columns_in_prose(markdown: &str) -> Vec<String> {
    let mut nested = 0usize;
    let mut found = Vec::new();
    for (event, range) in Parser::new_ext(markdown, markdown_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Paragraph) if nested == 0 => {
                let source = &markdown[range];
                if source.lines().skip(1).any(|line| line.starts_with("  ") && !line.trim().is_empty()) {
                    found.push(source.lines().next().unwrap_or_default().to_string());
                }
            }
            Event::Start(Tag::Item | Tag::BlockQuote(_) | Tag::Table(_) | Tag::FootnoteDefinition(_)) => nested += 1,
            Event::End(TagEnd::Item | TagEnd::BlockQuote(_) | TagEnd::Table | TagEnd::FootnoteDefinition) => {
                nested -= 1;
            }
            _ => {}
        }
    }
    found
}

/// The CLI reference keeps the after-help's lines (the exit codes, in columns) as they are,
/// in a code block, and no page of the book lays out columns in a paragraph.
#[test]
fn the_cli_reference_keeps_the_exit_code_table_in_lines() {
    let src = repo_root().join("docs/src");
    let mut problems = Vec::new();
    for page in book_pages() {
        for first_line in columns_in_prose(&std::fs::read_to_string(&page).unwrap()) {
            problems
                .push(format!("{}: a paragraph in columns: {first_line}", page.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(
        problems.is_empty(),
        "Markdown joins these lines into one (use a code block or a table):\n{}",
        problems.join("\n")
    );
    let cli = std::fs::read_to_string(src.join("reference/cli.md")).unwrap();
    let block = cli.split("```text\nExit codes").nth(1).expect("the exit codes in a `text` code block");
    let block = &block[..block.find("\n```").expect("the block ends")];
    for code in ["\n  0  ok", "\n  1  findings", "\n  2  usage"] {
        assert!(block.contains(code), "the exit-code block lacks `{}`:\n{block}", code.trim());
    }
    // The page as clap-markdown wrote it before the after-help was fenced is caught.
    let flattened = "## `ballast`\n\n**Usage:** `ballast <COMMAND>`\n\nExit codes (every command):\n  0  ok: valid\n  \
                     1  findings or invalid input\n\n###### **Subcommands:**\n\n* `simulate` — Simulate\n  a pool\n";
    assert_eq!(columns_in_prose(flattened), ["Exit codes (every command):"]);
}

/// A flag whose `--` smart punctuation curled into a dash (`–strict`, `—json`): a dash
/// starting a word. Ranges (`150–200`) and spaced dashes (`a — b`) are not flags.
fn curled_flags(html: &str) -> Vec<String> {
    let chars: Vec<char> = html.chars().collect();
    let mut found = Vec::new();
    for (i, pair) in chars.windows(2).enumerate() {
        let starts_word = i == 0 || chars[i - 1].is_whitespace() || matches!(chars[i - 1], '(' | '>' | '[' | '"');
        if matches!(pair[0], '–' | '—') && pair[1].is_ascii_lowercase() && starts_word {
            found.push(chars[i..].iter().take_while(|c| c.is_alphanumeric() || matches!(c, '–' | '—' | '-')).collect());
        }
    }
    found
}

/// The book as mdBook builds it (the mdbook `scripts/test` installs) writes each `--flag` as
/// typed, in prose as in code: smart punctuation is off (docs/book.toml).
#[test]
fn the_book_shows_flags_as_written() {
    assert_eq!(curled_flags("with –strict, (—json) or >–plot; pages 150–200, a — b"), ["–strict", "—json", "–plot"]);
    let mdbook = cache_dir().map(|c| c.join("mdbook/bin/mdbook"));
    let Some(mdbook) = mdbook.filter(|m| m.exists()) else {
        assert!(!required(), "CI=true but mdbook is missing: run scripts/test");
        eprintln!("skipped: mdbook is missing (scripts/test installs it)");
        return;
    };
    let out = std::env::temp_dir().join(format!("ballast-book-{}", std::process::id()));
    let built = std::process::Command::new(&mdbook)
        .args(["build", "docs", "--dest-dir"])
        .arg(&out)
        .current_dir(repo_root())
        .output()
        .expect("mdbook runs");
    assert!(built.status.success(), "mdbook build docs: {}", String::from_utf8_lossy(&built.stderr));
    let mut curled = Vec::new();
    let mut pages = 0;
    for entry in std::fs::read_dir(&out).unwrap().chain(std::fs::read_dir(out.join("reference")).unwrap()) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "html") {
            pages += 1;
            let html = std::fs::read_to_string(&path).unwrap();
            curled.extend(curled_flags(&html).into_iter().map(|f| format!("{}: {f}", path.display())));
        }
    }
    let cli = std::fs::read_to_string(out.join("reference/cli.html")).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    assert!(pages > 10, "the book's HTML pages: {pages}");
    assert!(curled.is_empty(), "flags curled into dashes:\n{}", curled.join("\n"));
    assert!(cli.contains("with --strict, warned about"), "reference/cli.html shows `--strict` in prose as typed");
}

/// Each `# yaml-language-server: $schema=TARGET` modeline in a text.
fn schema_modelines(text: &str) -> Vec<String> {
    text.split("yaml-language-server: $schema=")
        .skip(1)
        .map(|rest| rest.split(|c: char| c.is_whitespace() || c == '`').next().unwrap_or_default().to_string())
        .collect()
}

/// The config's JSON Schema is hosted nowhere, so nothing names it by a URL: it has no `$id`,
/// its references are within itself, and every modeline naming it (the example config's, the
/// reference page's, the schema's own advice) is a path; the example's names the committed copy.
#[test]
fn the_config_schema_is_named_by_path_not_by_an_unhosted_url() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("docs/src/reference/ballast.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    assert!(schema.get("$id").is_none(), "the schema claims an `$id`: {}", schema["$id"]);
    let external: Vec<&str> = text
        .split("\"$ref\": \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|target| !target.starts_with("#/"))
        .collect();
    assert!(external.is_empty(), "`$ref`s outside the schema: {external:?}");
    let example = std::fs::read_to_string(root.join("ballast.example.yaml")).unwrap();
    let page = std::fs::read_to_string(root.join("docs/src/reference/config.md")).unwrap();
    let comment = schema["$comment"].as_str().unwrap_or_default();
    for (source, text) in
        [("ballast.example.yaml", example.as_str()), ("reference/config.md", &page), ("$comment", comment)]
    {
        let modelines = schema_modelines(text);
        assert!(!modelines.is_empty(), "{source} names no schema");
        for target in modelines {
            assert!(!target.contains("://") && !target.is_empty(), "{source}: the schema by `{target}`, not by a path");
        }
    }
    for target in schema_modelines(&example) {
        assert!(root.join(&target).is_file(), "ballast.example.yaml: no schema at {target}");
    }
    assert_eq!(
        schema_modelines("# yaml-language-server: $schema=https://example.com/s.json\n"),
        ["https://example.com/s.json"]
    );
}

/// Each command of a page: the lines of its `sh` and `bash` code blocks (continuations
/// joined, comments dropped) and its inline code spans, whitespace collapsed.
fn page_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_shell_block = false;
    for event in Parser::new_ext(markdown, markdown_options()) {
        match event {
            Event::Start(Tag::CodeBlock(pulldown_cmark::CodeBlockKind::Fenced(lang))) => {
                in_shell_block = matches!(lang.as_ref(), "sh" | "bash");
            }
            Event::End(TagEnd::CodeBlock) => in_shell_block = false,
            Event::Text(text) if in_shell_block => {
                let joined = text.replace("\\\n", " ");
                for line in joined.lines() {
                    let command = line.split(" # ").next().unwrap_or_default().trim();
                    if !command.is_empty() && !command.starts_with('#') {
                        commands.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
                    }
                }
            }
            Event::Code(code) => commands.push(code.split_whitespace().collect::<Vec<_>>().join(" ")),
            _ => {}
        }
    }
    commands
}

/// What the build commands may name: the workspace's packages (by directory: features and
/// binaries), the CLI's version, the base's image name, and cargo-lambda's `build --help`.
struct BuildFacts {
    packages: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>,
    bins: BTreeSet<String>,
    version: String,
    base_image: String,
    cargo_lambda_help: Option<String>,
}

fn build_facts() -> BuildFacts {
    let root = repo_root().canonicalize().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline", "--locked"])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut packages = BTreeMap::new();
    let mut bins = BTreeSet::new();
    let mut version = String::new();
    for package in metadata["packages"].as_array().unwrap() {
        let manifest = Path::new(package["manifest_path"].as_str().unwrap()).canonicalize().unwrap();
        let dir = manifest.parent().unwrap().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let features = package["features"].as_object().unwrap().keys().cloned().collect();
        let package_bins: BTreeSet<String> = package["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin")))
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        bins.extend(package_bins.iter().cloned());
        if package["name"] == "ballast-cli" {
            version = package["version"].as_str().unwrap().to_string();
        }
        packages.insert(dir, (features, package_bins));
    }
    let kustomization: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(root.join("infra/k8s/kustomization.yaml")).unwrap()).unwrap();
    let base_image = kustomization["images"][0]["name"].as_str().unwrap().to_string();
    let cargo_lambda_help = std::env::var_os("BALLAST_CARGO_LAMBDA_DIR")
        .map(|dir| Path::new(&dir).join("cargo-lambda"))
        .filter(|exe| exe.exists())
        .map(|exe| {
            let help = std::process::Command::new(exe).args(["lambda", "build", "--help"]).output().unwrap();
            String::from_utf8_lossy(&help.stdout).into_owned()
        });
    BuildFacts { packages, bins, version, base_image, cargo_lambda_help }
}

/// The value after `flag` (`--path P`, `-f F`) in each place it occurs.
fn flag_values<'a>(words: &[&'a str], flag: &str) -> Vec<&'a str> {
    words.windows(2).filter(|w| w[0] == flag).map(|w| w[1]).collect()
}

/// What is wrong with one documented command, by the kind of build it runs (`None` when it
/// is not one of them).
fn build_command_problems(command: &str, facts: &BuildFacts) -> Option<(&'static str, Vec<String>)> {
    let root = repo_root();
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut problems = Vec::new();
    let kind = Some(if command.starts_with("cargo install") {
        for path in flag_values(&words, "--path") {
            match facts.packages.get(path) {
                None => problems.push(format!("no package at {path}")),
                Some((features, _)) => {
                    for feature in flag_values(&words, "--features") {
                        if !features.contains(feature) {
                            problems.push(format!("{path} has no feature `{feature}`"));
                        }
                    }
                }
            }
        }
        "cargo install"
    } else if command.starts_with("cargo lambda build") {
        for bin in flag_values(&words, "--bin") {
            if !facts.bins.contains(bin) {
                problems.push(format!("no binary `{bin}` in the workspace"));
            }
        }
        if let Some(help) = &facts.cargo_lambda_help {
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                if !help.contains(&format!("{flag} ")) {
                    problems.push(format!("cargo lambda build has no `{flag}`"));
                }
            }
        }
        "cargo lambda build"
    } else if command.starts_with("docker buildx build") {
        for file in flag_values(&words, "-f") {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            if text.is_empty() {
                problems.push(format!("no Dockerfile {file}"));
            }
            for arg in flag_values(&words, "--build-arg") {
                let name = arg.split('=').next().unwrap_or_default();
                if !text.lines().any(|l| l.starts_with(&format!("ARG {name}"))) {
                    problems.push(format!("{file} declares no ARG {name}"));
                }
            }
        }
        "docker buildx build"
    } else if command.starts_with("kustomize edit set image") {
        let name = words.get(4).and_then(|w| w.split('=').next()).unwrap_or_default();
        if name != facts.base_image {
            problems.push(format!("the base's image is `{}`, not `{name}`", facts.base_image));
        }
        "kustomize edit set image"
    } else if let Some(script) = words.iter().find(|w| w.starts_with("scripts/")) {
        use std::os::unix::fs::PermissionsExt;
        let path = root.join(script);
        match std::fs::metadata(&path) {
            Ok(m) if m.permissions().mode() & 0o111 != 0 => {
                // The settings given to it (`NAME=value` before it) are ones it reads.
                let text = std::fs::read_to_string(&path).unwrap();
                let before = words.iter().take_while(|w| *w != script);
                for name in before.filter_map(|w| w.split_once('=')).map(|(n, _)| n) {
                    if !name.starts_with("CARGO_") && !text.contains(name) {
                        problems.push(format!("{script} reads no {name}"));
                    }
                }
            }
            _ => problems.push(format!("no executable {script}")),
        }
        "scripts/"
    } else if command.starts_with("sam build") {
        for template in flag_values(&words, "-t") {
            if !root.join(template).exists() {
                problems.push(format!("no template {template}"));
            }
        }
        "sam build"
    } else {
        ""
    })
    .filter(|kind| !kind.is_empty());
    // The release set's files, wherever named, are named for the CLI's version.
    let release_set: Vec<&&str> = words.iter().filter(|w| w.contains("dist/")).collect();
    let kind = match kind {
        Some(kind) => kind,
        None if !release_set.is_empty() => "dist/",
        None => return None,
    };
    for word in release_set {
        let versions = word.split(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|s| s.matches('.').count() == 2);
        for v in versions.map(|v| v.trim_matches('.')).filter(|v| v.split('.').all(|p| !p.is_empty())) {
            if v != facts.version {
                problems.push(format!("{word}: version {v}, the release set's is {}", facts.version));
            }
        }
    }
    Some((kind, problems))
}

/// The build-from-source commands of the install and getting-started pages and the README
/// name what exists: the package and its feature, the functions' binaries and cargo-lambda's
/// flags, the Dockerfile and its build arguments, executable scripts and the settings they
/// read, the release set's version, the base's image name. (The builds themselves take an
/// hour and more on two cores, and `docker`, `kustomize` and `skopeo` are not here; the `sh`
/// blocks, the overlay with the image among them, are run by `rehearsal.rs`.)
#[test]
fn the_documented_build_commands_name_what_exists() {
    let facts = build_facts();
    assert!(facts.bins.contains("schedule") && facts.version.split('.').count() == 3, "{:?}", facts.bins);
    let mut kinds = BTreeSet::new();
    let mut problems = Vec::new();
    for page in ["docs/src/install.md", "docs/src/getting-started.md", "README.md"] {
        let text = std::fs::read_to_string(repo_root().join(page)).unwrap();
        // `cd DIR && kustomize ...`: each command of a chain on its own.
        for command in page_commands(&text).iter().flat_map(|c| c.split(" && ")) {
            if let Some((kind, found)) = build_command_problems(command, &facts) {
                kinds.insert(kind);
                problems.extend(found.into_iter().map(|p| format!("{page}: `{command}`: {p}")));
            }
        }
    }
    let all = [
        "cargo install",
        "cargo lambda build",
        "docker buildx build",
        "kustomize edit set image",
        "scripts/",
        "sam build",
        "dist/",
    ];
    assert_eq!(kinds, BTreeSet::from(all), "the kinds of build command the pages show");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Each kind of mistake is caught.
    for wrong in [
        "cargo install --locked --path functions/cli --features awz",
        "cargo lambda build --release --arm64 --bin scheduler",
        "docker buildx build -f functions/forwarder/Dockerfile --build-arg GIT_SHA=1 .",
        "kustomize edit set image ghcr.io/ballast/forwarder=x",
        "BALLAST_REGISTRY=x scripts/release",
        "skopeo copy oci-archive:dist/ballast-forwarder-9.9.9.oci.tar:9.9.9 x",
    ] {
        let (_, found) = build_command_problems(wrong, &facts).unwrap();
        assert!(!found.is_empty(), "not caught: {wrong}");
    }
}
