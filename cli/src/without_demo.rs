//! `instanceha demo` in a build without the `demo` feature (the operator's
//! slim CLI, which leaves out the simulated cloud and the services): the
//! command is still there, and says how to get it.

use clap::Args;

use crate::commands::Context;
use crate::error::{Error, Exit};

/// Whatever was given; nothing is read.
#[derive(Args, Debug)]
pub struct DemoArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _ignored: Vec<String>,
}

pub async fn run(_: DemoArgs, _: &mut Context) -> Result<Exit, Error> {
    Err(Error::Usage(NOT_BUILT.to_owned()))
}

/// What `demo` says in this build.
pub const NOT_BUILT: &str = "this instanceha was built without the demo (the `demo` feature): \
     run it from a source checkout with `cargo run --release -p instanceha-cli -- demo`, or \
     build the CLI with its default features";

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::Cli;

    #[test]
    fn demo_says_it_is_not_in_this_build() {
        let cli = Cli::try_parse_from([
            "instanceha",
            "demo",
            "--speed",
            "25",
            "--inject",
            "nova-503",
        ])
        .expect("demo parses whatever follows");
        let crate::Command::Demo(args) = cli.command else {
            panic!("not demo");
        };
        let settings = crate::config::Settings::load(Default::default(), None).unwrap();
        let mut ctx = Context::stdout(settings);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = runtime.block_on(run(args, &mut ctx)).unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        assert!(err.to_string().contains("built without the demo"), "{err}");
    }
}
