//! What a node measures of itself before each heartbeat (`NodeStats`): CPU,
//! memory, network and disk through `sysinfo`, its object store, its tasks and
//! workers from the agent's state, and, on a node with GPUs, their use from
//! `nvidia-smi` (every few seconds: it is a process to start).

use super::AgentShared;
use crate::clock;
use oxray_proto::{GpuStats, NodeStats};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use sysinfo::{CpuRefreshKind, Disks, MemoryRefreshKind, Networks, RefreshKind, System};

/// How often GPUs are asked (each time starts `nvidia-smi`).
const GPU_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct StatsSampler {
    system: System,
    networks: Networks,
    disks: Disks,
    session_dir: PathBuf,
    gpus: bool,
    last_gpus: Option<(Instant, Vec<GpuStats>)>,
}

impl StatsSampler {
    pub(crate) fn new(session_dir: &Path, gpus: bool) -> Self {
        let system = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_cpu_usage())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        );
        Self {
            system,
            networks: Networks::new_with_refreshed_list(),
            disks: Disks::new_with_refreshed_list(),
            session_dir: session_dir.to_path_buf(),
            gpus,
            last_gpus: None,
        }
    }

    /// One sample: the host's use now, and the agent's own.
    pub(crate) async fn sample(&mut self, agent: &AgentShared) -> NodeStats {
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.networks.refresh(true);
        self.disks.refresh(true);
        let (received, sent) = self
            .networks
            .iter()
            .filter(|(name, _)| name.as_str() != "lo")
            .fold((0, 0), |(r, s), (_, data)| (r + data.total_received(), s + data.total_transmitted()));
        // The filesystem holding the session directory: the longest mount point that is its prefix.
        let disk = self
            .disks
            .iter()
            .filter(|d| self.session_dir.starts_with(d.mount_point()))
            .max_by_key(|d| d.mount_point().as_os_str().len());
        let (disk_used, disk_total) =
            disk.map(|d| (d.total_space().saturating_sub(d.available_space()), d.total_space())).unwrap_or((0, 0));
        let mut stats = {
            let st = agent.state.lock();
            let store = st.store_stats();
            let counts = st.task_counts();
            NodeStats {
                time_ms: clock::now_ms(),
                cpu_percent: f64::from(self.system.global_cpu_usage()),
                memory_used: self.system.used_memory(),
                memory_total: self.system.total_memory(),
                network_received: received,
                network_sent: sent,
                disk_used,
                disk_total,
                store_used: store.shm_used as u64,
                store_capacity: store.capacity as u64,
                store_spilled: store.spilled_bytes as u64,
                store_objects: store.num_objects as u64,
                gpus: Vec::new(),
                tasks_running: counts.running,
                tasks_pending: counts.pending,
                tasks_finished: counts.finished,
                tasks_failed: counts.failed,
                workers: st.worker_count() as u32,
            }
        };
        if self.gpus {
            let stale = self.last_gpus.as_ref().is_none_or(|(at, _)| at.elapsed() >= GPU_EVERY);
            if stale {
                self.last_gpus = Some((Instant::now(), query_gpus().await));
            }
            stats.gpus = self.last_gpus.as_ref().map(|(_, g)| g.clone()).unwrap_or_default();
        }
        stats
    }
}

async fn query_gpus() -> Vec<GpuStats> {
    let run = tokio::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"])
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(3), run).await {
        Ok(Ok(out)) if out.status.success() => parse_gpus(&String::from_utf8_lossy(&out.stdout)),
        _ => Vec::new(),
    }
}

/// `nvidia-smi`'s CSV: index, utilization %, memory used MiB, memory total MiB.
fn parse_gpus(csv: &str) -> Vec<GpuStats> {
    const MIB: u64 = 1 << 20;
    csv.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let [index, util, used, total] = fields.as_slice() else { return None };
            Some(GpuStats {
                index: index.parse().ok()?,
                utilization_percent: util.parse().unwrap_or(0.0),
                memory_used: used.parse::<u64>().ok()? * MIB,
                memory_total: total.parse::<u64>().ok()? * MIB,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_gpus;

    #[test]
    fn nvidia_smi_csv_is_read() {
        let gpus = parse_gpus("0, 87, 1024, 81559\n1, [N/A], 0, 81559\nbogus\n");
        assert_eq!(gpus.len(), 2);
        assert_eq!((gpus[0].index, gpus[0].utilization_percent, gpus[0].memory_used), (0, 87.0, 1024 << 20));
        assert_eq!(gpus[1].utilization_percent, 0.0);
    }
}
