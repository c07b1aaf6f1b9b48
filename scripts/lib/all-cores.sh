# Lets the calling shell, and everything it starts, run on every online core. A process started
# under a narrower affinity (a sandbox whose init was placed on one core hands that core down to
# every process) would build and test on one core of several; the data plane pins its own
# threads (the PMDs, the emulated VMs, the test bed's shield), so the rest may use them all.
use_all_cores() {
  local online had
  online=$(cat /sys/devices/system/cpu/online)
  had=$(taskset -pc $$ | sed 's/.*: //')
  if [ "$(nproc)" -lt "$(getconf _NPROCESSORS_ONLN)" ]; then
    taskset -pc "$online" $$ >/dev/null
    echo "cores: this run was confined to core(s) $had; widened to every online core ($online)"
  fi
}
