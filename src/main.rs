//! The `slipway` binary: parses the command line and hands over to the role it names. The roles are crates of
//! their own (the edge, the webhook) or modules of the library; only this binary depends on all of them, so a
//! change in one role recompiles that role and relinks the binary.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // ring and aws-lc are both compiled in (the S3 client library brings aws-lc), so rustls cannot pick the
    // process's provider by itself: every TLS client and server of slipway's own uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cli::Cli::parse();
    slipway::telemetry::init(cli.log_format);
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
