# Sourced by scripts/test.sh and scripts/repeat_suite.sh: sets the array `ci_exclude` to the ctest
# arguments that leave out the labels kept outside CI (exhaustive, fresh_seeds, optional_peers: the
# verdicts that need an optional set-up such as MFSDP_EXTRAS=deepspeed), unless the
# arguments given ("$@") already choose tests by label or name.
ci_exclude=(-LE '^(exhaustive|fresh_seeds|optional_peers)$')
for _a in "$@"; do
  case "$_a" in -L|--label-regex|-LE|--label-exclude|-R|--tests-regex|-E|--exclude-regex|-I|--tests-information) ci_exclude=() ;; esac
done
unset _a
