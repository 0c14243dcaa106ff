//! `instanceha`: the operator's command-line client of instance-ha. Each
//! subcommand is a module under `commands`; `main` only parses the command
//! line, resolves the settings and maps the result to an exit code.

mod client;
mod commands;
mod config;
mod convert;
#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "demo")]
mod demo_agents;
mod error;
mod login;
mod manual;
mod output;
mod resources;
mod watch;
#[cfg(not(feature = "demo"))]
mod without_demo;
#[cfg(not(feature = "demo"))]
use without_demo as demo;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use commands::Context;
use commands::host::HostCommand;
use commands::notification::NotificationCommand;
use commands::segment::SegmentCommand;
use commands::vmove::VmoveCommand;
use config::{Overrides, Settings, Token};
use error::{EXIT_CODES, Error, Exit};
use output::Format;

#[derive(Parser, Debug)]
#[command(
    name = "instanceha",
    version,
    about = "Drive instance-ha (instance high availability for OpenStack) from a terminal",
    long_about = "Drive instance-ha (instance high availability for OpenStack) from a terminal: \
                  failover segments, hosts, failure notifications and the recovery of each \
                  instance (vmoves), with live progress for a running recovery.",
    after_help = EXIT_CODES,
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    columns: ColumnArgs,
    #[command(subcommand)]
    command: Command,
}

/// `-c/--column`, as the openstack CLI takes it.
#[derive(Args, Debug)]
struct ColumnArgs {
    /// Show only this column of a list, or this field of a record, by the
    /// name the table shows (repeat it for more, in the order wanted; any
    /// format)
    #[arg(long = "column", short = 'c', global = true, value_name = "COLUMN")]
    column: Vec<String>,
}

/// Connection and output settings; flags win over environment variables,
/// which win over the configuration file, which wins over the defaults.
#[derive(Args, Debug)]
struct GlobalArgs {
    /// The instanceha-api address [default: http://127.0.0.1:15869]
    #[arg(
        long,
        global = true,
        env = "INSTANCEHA_CLI_ENDPOINT",
        value_name = "URL"
    )]
    endpoint: Option<String>,
    /// Sent as `authorization: Bearer TOKEN` on every call
    #[arg(
        long,
        global = true,
        env = "INSTANCEHA_CLI_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// Output format [default: table]
    #[arg(
        long,
        short = 'f',
        global = true,
        env = "INSTANCEHA_CLI_FORMAT",
        value_enum
    )]
    format: Option<Format>,
    /// How long to wait for each answer (for example 30s, 2m) [default: 30s]
    #[arg(
        long,
        global = true,
        env = "INSTANCEHA_CLI_TIMEOUT",
        value_name = "DURATION",
        value_parser = config::parse_timeout
    )]
    timeout: Option<Duration>,
    /// Configuration file (TOML: endpoint, token, format, timeout)
    /// [default: $XDG_CONFIG_HOME/instanceha/cli.toml or
    /// ~/.config/instanceha/cli.toml, if it exists]
    #[arg(
        long,
        global = true,
        env = "INSTANCEHA_CLI_CONFIG",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,
    #[command(flatten)]
    login: login::LoginArgs,
}

impl GlobalArgs {
    fn overrides(self) -> Overrides {
        Overrides {
            endpoint: self.endpoint,
            token: self.token.map(Token::new),
            format: self.format,
            timeout: self.timeout,
            config: self.config,
        }
    }
}

/// The subcommands. Each is one module with its own arguments and `run`;
/// adding one (for example `demo`) is a variant, a module and a match arm.
#[derive(Subcommand, Debug)]
enum Command {
    /// Failover segments: groups of compute hosts that recover each other
    #[command(subcommand)]
    Segment(SegmentCommand),
    /// Compute hosts of failover segments
    #[command(subcommand)]
    Host(HostCommand),
    /// Failure notifications and their recovery (create, list, show, watch)
    #[command(subcommand)]
    Notification(NotificationCommand),
    /// The per-instance records of a recovery
    #[command(subcommand)]
    Vmove(VmoveCommand),
    /// Run the whole system in this process against a simulated cloud: a
    /// compute host fails and its instances are recovered, live
    #[cfg_attr(
        not(feature = "demo"),
        command(about = "Not in this build (built without the `demo` feature)", long_about = None)
    )]
    Demo(demo::DemoArgs),
    /// Print a shell completion script (for example: `instanceha
    /// completion bash > /etc/bash_completion.d/instanceha`)
    Completion(manual::CompletionArgs),
    /// Write the man pages (instanceha.1 and one per subcommand) into a
    /// directory, for packagers
    #[command(hide = true)]
    Man(manual::ManArgs),
}

/// The command line as clap parses it and as help, completions and man
/// pages show it.
fn command() -> clap::Command {
    manual::hide_unused_options(Cli::command())
}

async fn run(cli: Cli) -> Result<Exit, Error> {
    // Generated from the command line alone: no settings are needed.
    match &cli.command {
        Command::Completion(args) => return manual::completion(args, command()),
        Command::Man(args) => {
            let pages = Cli::command().disable_help_subcommand(true);
            return manual::man_pages(args, manual::hide_unused_options(pages));
        }
        _ => {}
    }
    let login = cli.global.login.clone();
    let mut settings = Settings::load(
        cli.global.overrides(),
        config::default_path_from_env().as_deref(),
    )?;
    // The demo runs its own cloud and API: no login to the operator's.
    if !matches!(cli.command, Command::Demo(_)) {
        let env = std::env::vars().collect();
        login::log_in(&login, &env, &mut settings).await?;
    }
    let mut ctx = Context::stdout(settings);
    ctx.columns = cli.columns.column;
    match cli.command {
        Command::Segment(command) => commands::segment::run(command, &mut ctx).await,
        Command::Host(command) => commands::host::run(command, &mut ctx).await,
        Command::Notification(command) => commands::notification::run(command, &mut ctx).await,
        Command::Vmove(command) => commands::vmove::run(command, &mut ctx).await,
        Command::Demo(args) => demo::run(args, &mut ctx).await,
        Command::Completion(_) | Command::Man(_) => unreachable!("answered above"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    match run(cli).await {
        Ok(exit) => exit.into(),
        Err(err) => {
            if !err.is_broken_pipe() {
                eprintln!("error: {}", output::shown(&err.to_string()));
            }
            err.exit().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn local_subcommands_do_not_offer_the_connection_options() {
        let mut command = command();
        command.build();
        let demo = command
            .find_subcommand_mut("demo")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(
            !demo.contains("--endpoint") && !demo.contains("--token"),
            "{demo}"
        );
        assert!(demo.contains("--format"), "{demo}");
        let list = command
            .find_subcommand_mut("segment")
            .unwrap()
            .find_subcommand_mut("list")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(
            list.contains("--endpoint") && list.contains("--column"),
            "{list}"
        );
        // Hidden, yet still accepted (and ignored).
        Cli::from_arg_matches(
            &super::command()
                .try_get_matches_from(["instanceha", "demo", "--endpoint", "http://x:1"])
                .unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn help_documents_the_exit_codes_and_the_environment() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Exit codes:"), "{help}");
        assert!(help.contains("INSTANCEHA_CLI_TOKEN"), "{help}");
    }

    #[test]
    fn flags_parse_into_settings() {
        let cli = Cli::try_parse_from([
            "instanceha",
            "--format",
            "json",
            "--timeout",
            "2m",
            "segment",
            "list",
            "--enabled",
            "false",
            "--limit",
            "5",
        ])
        .unwrap();
        assert_eq!(cli.global.format, Some(Format::Json));
        assert_eq!(cli.global.timeout, Some(Duration::from_secs(120)));
        let Command::Segment(SegmentCommand::List(args)) = cli.command else {
            panic!("not segment list");
        };
        assert_eq!(args.enabled, Some(false));
        assert_eq!(args.paging.limit, 5);
        assert!(!args.paging.all);
    }

    #[test]
    fn usage_mistakes_are_refused_by_clap() {
        for argv in [
            &["instanceha", "segment", "create", "x"][..],
            &[
                "instanceha",
                "segment",
                "create",
                "x",
                "--recovery-method",
                "fast",
            ],
            &["instanceha", "segment", "update", "x"],
            &[
                "instanceha",
                "segment",
                "update",
                "x",
                "--enable",
                "--disable",
            ],
            &["instanceha", "segment", "list", "--limit", "0"],
            &["instanceha", "segment", "list", "--limit", "1001"],
            &["instanceha", "segment", "list", "--enabled", "maybe"],
            &["instanceha", "--timeout", "soon", "segment", "list"],
            &["instanceha", "--format", "xml", "segment", "list"],
            &[
                "instanceha",
                "notification",
                "create",
                "--type",
                "VM",
                "--hostname",
                "h",
            ],
            &[
                "instanceha",
                "notification",
                "create",
                "--type",
                "VM",
                "--hostname",
                "h",
                "--payload",
                "nonsense",
            ],
        ] {
            let err = Cli::try_parse_from(argv).expect_err(&format!("{argv:?} should fail"));
            assert_eq!(err.exit_code(), 2, "{argv:?}");
        }
    }

    #[test]
    fn payload_values_accumulate() {
        let cli = Cli::try_parse_from([
            "instanceha",
            "notification",
            "create",
            "--type",
            "compute_host",
            "--hostname",
            "compute-1",
            "--payload",
            "event=STOPPED",
            "host_status=NORMAL",
            "--payload",
            "cluster_status=OFFLINE",
        ])
        .unwrap();
        let Command::Notification(NotificationCommand::Create(args)) = cli.command else {
            panic!("not notification create");
        };
        assert_eq!(args.payload.len(), 3);
    }
}
