# The PMD's core kept for it while a benchmark runs: the calling script runs again under
# `slaswitch experiment shield` (the test bed's shield, crates/slaswitch-testbed/src/core_shield.rs),
# which moves every thread of the machine that may move, the script itself included, to the
# other cores until the script ends and then gives each its own cores back. The programs the
# script starts pin their forwarding threads to core 0 themselves. Call it from the
# repository's root, after the build, with the script's arguments.
rerun_shielded() { # SCRIPT_NAME ARGS...
  [ -n "${SLASWITCH_SHIELDED_THREADS:-}" ] && return 0
  local script=$1
  shift
  exec "$PWD/target/release/slaswitch" experiment shield --pmd-cores 0 -- "$PWD/scripts/$script" "$@"
}
