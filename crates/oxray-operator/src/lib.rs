//! oxray's Kubernetes operator: the `OxrayCluster`, `OxrayJob` and
//! `OxrayService` resources (`crd`), checked (`spec`) and reconciled by pure
//! functions (`cluster`, `job`, `service`, `autoscale`) that a controller
//! (`controller`) drives against the API server, asking the head for its demand,
//! submitting jobs and deploying Serve configs (`head_api`).
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
pub mod service;
pub mod spec;
