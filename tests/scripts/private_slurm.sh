# A one-node SLURM cluster of our own, for tests: munged, slurmctld and slurmd started in a
# directory, on free ports, with a private munge key and socket, so that nothing of a system
# SLURM or munge is read or disturbed. Sourced after common.sh (free_port, fail).
#
#   start_private_slurm DIR JOB_ID   starts the daemons, waits until the node is idle, exports
#                                    SLURM_CONF; the first job gets JOB_ID
#   stop_private_slurm               stops what start_private_slurm started (also on a failure)
#
# The node is `hostname -s` with CPUs=8 though the machine may have 2: config_overrides lets
# slurmd take the configured count, so srun -n 4 runs on a 2-core CI machine. No cgroups:
# processes are tracked by their parents (proctrack/linuxproc), tasks are not bound (task/none).
# cred_expire=5: a requeued job may start again once its old credentials expire, 120 s by default.

SLURM_DAEMON_PIDS=()

stop_private_slurm() {
  local pid
  # Jobs first (a failed test may leave one running), so that no slurmstepd outlives its slurmd.
  if [ ${#SLURM_DAEMON_PIDS[@]} -gt 0 ] && [ -n "${SLURM_CONF:-}" ]; then
    scancel --user="$(id -un)" 2> /dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue --noheader 2> /dev/null)" ] && break; sleep 0.2; done
  fi
  for pid in "${SLURM_DAEMON_PIDS[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "${SLURM_DAEMON_PIDS[@]}"; do
    # A guard, not a timing: a daemon that ignores SIGTERM for 10 s is killed.
    timeout 10 tail --pid="$pid" -f /dev/null 2> /dev/null || kill -KILL "$pid" 2> /dev/null || true
  done
  SLURM_DAEMON_PIDS=()
}

# private_slurm_logs DIR: every daemon's log, for a failure message.
private_slurm_logs() {
  local log
  for log in "$1"/log/*; do echo "== $log" && tail -n 30 "$log"; done >&2
}

start_private_slurm() {
  local dir="$1" first_job="$2" node user
  node="$(hostname -s)"
  user="$(id -un)"
  command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v munged > /dev/null ||
    fail "slurmctld, slurmd or munged is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
  # loom's slurm launcher connects to the first host of the node list by name.
  getent hosts "$node" > /dev/null || fail "the host name '$node' does not resolve; srun's tasks could not find task 0"
  mkdir -p "$dir"/{munge,run,state,spool,log}
  # munged refuses a socket whose directories are not searchable by everyone, and a key others can read.
  chmod 711 "$dir" "$(dirname "$dir")"
  chmod 755 "$dir/run"
  chmod 700 "$dir/munge"
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --foreground --key-file="$dir/munge/munge.key" --socket="$dir/run/munge.socket" \
    --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log" \
    > "$dir/log/munged.out" 2>&1 &
  SLURM_DAEMON_PIDS+=($!)

  cat > "$dir/slurm.conf" << CONF
ClusterName=loomtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/run/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId=$first_job
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=loomtest Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  # munged must answer before the SLURM daemons ask it for credentials.
  for _ in $(seq 100); do [ -S "$dir/run/munge.socket" ] && break; sleep 0.1; done
  [ -S "$dir/run/munge.socket" ] || { private_slurm_logs "$dir"; fail "munged did not start"; }
  slurmctld -D -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 &
  SLURM_DAEMON_PIDS+=($!)
  slurmd -D -f "$SLURM_CONF" > "$dir/log/slurmd.out" 2>&1 &
  SLURM_DAEMON_PIDS+=($!)
  # The node registers within seconds; 60 s only guards against a daemon that never comes up.
  local state=""
  for _ in $(seq 300); do
    state="$(sinfo --noheader --format=%T 2> /dev/null || true)"
    [ "$state" = idle ] && return 0
    sleep 0.2
  done
  private_slurm_logs "$dir"
  fail "the private SLURM node is '$state' after 60 s, not idle"
}
