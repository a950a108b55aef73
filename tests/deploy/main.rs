//! The deployment under `deploy/`, tested as far as a machine without a cluster allows:
//! - [`validate`]: every kustomization builds with kubectl's kustomize and validates against
//!   the Kubernetes 1.37 schemas in strict mode;
//! - [`executable`]: the built manifests' commands, args, env, config files, secrets and
//!   volume mounts run as real local processes (Redis, coordinators, a worker, the submit Job)
//!   through a campaign to its end, with the probes and the preStop they declare; under prod
//!   through the loss of the Redis master and of every Redis pod ([`redis`]: the StatefulSet's
//!   pods, with their init containers and Sentinels);
//! - [`image`]: the Containerfile's runtime stage, built with buildah around the binary under
//!   test, runs `lanes --version` (skipped, saying so, where buildah cannot run).
//!
//! kubectl and kubernetes-validate come from the venv `./scripts/test.sh` installs. Built by
//! the `lanes` package so that it can run the `lanes` binary.

#![allow(unreachable_pub)]

mod executable;
mod image;
mod kubelet;
mod redis;
mod tools;
mod validate;
