//! The `slipway` binary: parses the command line and hands over to the role it names. The roles are crates of their
//! own (the API server `slipway-api`, the edge, the S3 gateway, the webhook) and only this package depends on all of
//! them, so a change in the edge, say, recompiles the edge and relinks the binary, not the API. The operator's
//! wiring and the flags it shares with the API server are still in `slipway-api`.

mod cli;

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // ring and aws-lc are both compiled in (the S3 client library brings aws-lc), so rustls cannot pick the
    // process's provider by itself: every TLS client and server of slipway's own uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cli::Cli::parse();
    slipway_api::telemetry::init(cli.log_format);
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
