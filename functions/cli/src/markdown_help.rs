//! The CLI reference page (`ballast markdown-help`, docs/src/reference/cli.md) from the clap
//! definitions, by clap-markdown.

use clap::Command;

/// The page for `command` and its subcommands. Each after-help text (the exit codes, laid
/// out in columns) becomes a `text` code block: clap-markdown writes it as it is, and
/// Markdown would join its lines into one paragraph.
pub fn page(command: Command) -> String {
    let options = clap_markdown::MarkdownOptions::new().title("CLI reference".into()).show_footer(false);
    clap_markdown::help_markdown_command_custom(&fence_after_help(command), &options)
}

fn fence_after_help(mut command: Command) -> Command {
    if let Some(text) = command.get_after_long_help().map(ToString::to_string) {
        command = command.after_long_help(code_block(&text));
    }
    if let Some(text) = command.get_after_help().map(ToString::to_string) {
        command = command.after_help(code_block(&text));
    }
    let names: Vec<String> = command.get_subcommands().map(|sub| sub.get_name().to_string()).collect();
    for name in names {
        command = command.mut_subcommand(name, fence_after_help);
    }
    command
}

fn code_block(text: &str) -> String {
    format!("```text\n{}\n```", text.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_after_help_keeps_its_lines_in_a_code_block() {
        let command = Command::new("tool")
            .after_help("Exit codes:\n  0  ok\n  1  findings")
            .subcommand(Command::new("sub").after_long_help("Columns:\n  a  b"));
        let page = page(command);
        assert!(page.contains("```text\nExit codes:\n  0  ok\n  1  findings\n```"), "{page}");
        assert!(page.contains("```text\nColumns:\n  a  b\n```"), "{page}");
    }
}
