//! The Lanes lane worker: runs claim → boot → reset → agent → evaluate → publish on a host.
