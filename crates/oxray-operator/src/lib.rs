//! oxray's Kubernetes operator: the `OxrayCluster` and `OxrayJob` resources
//! (`crd`), checked (`spec`) and reconciled by pure functions (`cluster`,
//! `job`, `autoscale`) that a controller (`controller`) drives against the API
//! server, asking the head for its demand and submitting jobs (`head_api`).
//! Its errors, and how a status shows each, are in `error`.
//! A binary of its own (`oxray-operator`), never part of the Python wheel.

pub mod autoscale;
pub mod cluster;
pub mod controller;
pub mod crd;
pub mod error;
pub mod head_api;
pub mod job;
pub mod resources;
pub mod spec;
