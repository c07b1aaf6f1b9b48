//! Connecting to etcd, the same way everywhere: bounded connect and request times, so a dead
//! etcd is noticed in seconds, not minutes.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::FleetError;

/// An etcd error, as the fleet's.
pub fn e(cause: etcd_client::Error) -> FleetError {
    FleetError::Etcd { cause }
}

/// Connects to the first of `endpoints` that answers.
pub async fn connect(endpoints: &[String]) -> Result<Client, FleetError> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
    Client::connect(endpoints, Some(opts))
        .await
        .map_err(|cause| FleetError::Connect { endpoints: endpoints.join(","), cause })
}
