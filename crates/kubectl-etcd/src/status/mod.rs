//! `kubectl etcd status`: gathered (`gather`, I/O), judged (`model`, pure) and shown
//! (`render`).

pub mod gather;
pub mod model;
pub mod render;

use anyhow::Result;

use crate::cli::{Output, StatusArgs};

pub async fn run(client: &kube::Client, ns: &str, a: &StatusArgs) -> Result<i32> {
    let s = gather::gather(client, ns, &a.name, a.timeout()).await?;
    match a.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&s)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&s)?),
        Output::Text => {
            use std::io::IsTerminal;
            print!("{}", render::text(&s, std::io::stdout().is_terminal(), now()));
        }
    }
    Ok(0)
}

/// Unix seconds now.
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}
