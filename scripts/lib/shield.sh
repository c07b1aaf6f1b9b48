# The PMD's core kept for it while a benchmark runs, as the test bed's shield does for a run
# (`crates/slaswitch-testbed/src/core_shield.rs`): every thread of the machine that the kernel
# lets move, but one named, is confined to core 1; each one's own set is kept in FILE and given
# back by `unshield_core0`. (A set worked out from this shell's own would be the confined one.)
shield_core0() { # FILE [THREAD_ID_LEFT_WHERE_IT_IS]
  local file=$1 leave=${2:-} t had
  for t in $(ps -eLo lwp=); do
    [ "$t" = "$leave" ] && continue
    had=$(taskset -p -c "$t" 2>/dev/null | sed 's/.*: //') || continue
    if taskset -p -c 1 "$t" >/dev/null 2>&1; then echo "$t $had" >>"$file"; fi
  done
}
unshield_core0() { # FILE
  local t had
  [ -f "$1" ] || return 0
  while read -r t had; do taskset -p -c "$had" "$t" >/dev/null 2>&1 || true; done <"$1"
  rm -f "$1"
}
