//! `--cpus`: shards pinned to CPUs, one each (Cento's core affinity), so a shard keeps its
//! caches and the scheduler does not move it under load.

/// The CPUs this process may run on (its affinity mask: a container or `taskset` may allow
/// fewer than the machine has).
pub(crate) fn allowed() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is the empty set; sched_getaffinity fills it for this
        // thread (pid 0), and CPU_ISSET reads it within its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect();
            }
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// `0-3,6`: a CPU list written back as ranges.
pub(crate) fn list_text(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Checks a `--cpus` list against the shards and the CPUs this process may use.
pub(crate) fn check(cpus: &[usize], shards: usize) -> Result<(), String> {
    if cpus.len() != shards {
        return Err(format!(
            "--cpus lists {} CPU(s) for {shards} shard(s) (--threads × inputs): give one CPU a shard",
            cpus.len()
        ));
    }
    let allowed = allowed();
    if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(format!(
            "--cpus: CPU {c} is not one sonde may run on (allowed here: {})",
            list_text(&allowed)
        ));
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin(cpu: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the set is built with CPU_ZERO/CPU_SET within its size, and applies to the
        // calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        Err(std::io::Error::other("--cpus needs Linux"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_checked_against_the_shards_and_the_machine() {
        let allowed = allowed();
        assert!(!allowed.is_empty());
        assert_eq!(check(&allowed[..1], 1), Ok(()));
        let e = check(&allowed[..1], 2).unwrap_err();
        assert!(e.contains("1 CPU(s) for 2 shard(s)"), "{e}");
        let e = check(&[100_000], 1).unwrap_err();
        assert!(e.contains("CPU 100000 is not one sonde may run on"), "{e}");
        assert_eq!(list_text(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn a_pinned_thread_runs_where_it_was_put() {
        let cpu = *allowed().last().unwrap();
        std::thread::spawn(move || {
            pin(cpu).unwrap();
            assert_eq!(allowed(), vec![cpu]);
        })
        .join()
        .unwrap();
    }
}
