//! The command line's own documentation, generated from its definition:
//! shell completion scripts (`instanceha completion SHELL`, clap_complete)
//! and man pages (`instanceha man --out DIR`, clap_mangen), and the global
//! options hidden where they do nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Command};
use clap_complete::Shell;

use crate::error::{Error, Exit};

#[derive(Args, Debug, Clone)]
pub struct CompletionArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    /// The directory to write `instanceha.1` and one page per subcommand
    /// (`instanceha-segment-list.1`, ...) into; created if missing
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// The subcommands that do not talk to an instanceha-api of the operator's,
/// and the global options each still uses: the others (the endpoint, the
/// credentials, `--column`) are accepted but hidden from their help, man
/// page and completions.
const LOCAL_COMMANDS: &[(&str, &[&str])] = &[
    ("demo", &["format", "timeout", "config"]),
    ("completion", &[]),
    ("man", &[]),
];

/// `command` with the global options a local subcommand ignores hidden
/// from it: each is declared again on the subcommand, hidden, before clap
/// propagates the global options (it skips a subcommand that has one of the
/// same name), so that it is still accepted there. (Changing the
/// propagated option after `build` would leave clap's index of option
/// names pointing at the wrong options.)
pub fn hide_unused_options(mut command: Command) -> Command {
    let globals: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .cloned()
        .collect();
    for &(name, used) in LOCAL_COMMANDS {
        command = command.mut_subcommand(name, |mut sub| {
            for arg in globals
                .iter()
                .filter(|a| !used.contains(&a.get_id().as_str()))
            {
                sub = sub.arg(arg.clone().hide(true));
            }
            sub
        });
    }
    command
}

/// Prints the completion script for `args.shell`.
pub fn completion(args: &CompletionArgs, mut command: Command) -> Result<Exit, Error> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "instanceha", &mut script);
    let mut stdout = std::io::stdout();
    stdout.write_all(&script).map_err(Error::Write)?;
    stdout.flush().map_err(Error::Write)?;
    Ok(Exit::Ok)
}

/// Writes the man pages into `args.out` and names each on stdout.
pub fn man_pages(args: &ManArgs, mut command: Command) -> Result<Exit, Error> {
    // Built, each subcommand knows its path (`instanceha-host-list`).
    command.build();
    let failed = |e: std::io::Error| {
        Error::Usage(format!(
            "cannot write the man pages into {}: {e}",
            args.out.display()
        ))
    };
    std::fs::create_dir_all(&args.out).map_err(failed)?;
    let mut written = Vec::new();
    write_pages(command, &args.out, &mut written).map_err(failed)?;
    let list: String = written
        .iter()
        .map(|path| format!("{}\n", path.display()))
        .collect();
    let mut stdout = std::io::stdout();
    stdout.write_all(list.as_bytes()).map_err(Error::Write)?;
    Ok(Exit::Ok)
}

/// One page for `command` (named by its path, `instanceha-host-list.1`)
/// and for each of its visible subcommands.
fn write_pages(command: Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, written)?;
    }
    written.push(clap_mangen::Man::new(command).generate_to(dir)?);
    Ok(())
}
