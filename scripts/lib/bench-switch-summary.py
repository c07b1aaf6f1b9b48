"""The summary of scripts/bench-switch: per kind, the medians over the rounds and the ratios
taken per round (each kind ran on every contestant back to back), then their median and range.

Rows of the results file: contestant kind Mpps busy_cyc_per_pkt busy_pct emc_pct mega_pct
core_cyc_per_pkt refused_pct, and for slaswitch's builds the busy port's cycles per packet in its
ingress, classify and egress stages.

The placement file (optional third argument) has a row per window: kind contestant round and the
round trip of a cache line between cores 0 and 1, in ns, before and after it (every contestant
paused). The readings fall into groups, one per placement the host gave the two cores; a
window whose two readings fall in one group is compared with the other contestants' windows at
that placement (every contestant's windows interleaved in time, so each placement holds windows
of all of them).
"""
import statistics
import sys

rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
rounds = sys.argv[2]
placements = [line.split() for line in open(sys.argv[3]) if line.strip()] if len(sys.argv) > 3 else []
SPLIT_AT = 1.6
KINDS = [k for k in ("1", "10000", "sg", "ports32") if any(r[1] == k for r in rows)]
BUSY, CORE = 3, 7
STAGES = {"ingress": 9, "classify": 10, "egress": 11}


def figure_col(kind):
    """Kind ports32 is about idle ports' polls, which only the whole core's time holds."""
    return CORE if kind == "ports32" else BUSY


def col(who, kind, c, keep=None):
    """Contestant `who`'s column `c` for `kind`, one value per round (its rows are in round
    order), of the rounds in `keep` only when given."""
    mine = [r for r in rows if r[0] == who and r[1] == kind]
    return [float(r[c]) for i, r in enumerate(mine, 1)
            if len(r) > c and r[c] != "-" and (keep is None or i in keep)]


def med(who, kind, c):
    v = col(who, kind, c)
    return statistics.median(v) if v else float("nan")


def ratio(a, b, kind, c=None, keep=None):
    c = figure_col(kind) if c is None else c
    r = [x / y for x, y in zip(col(a, kind, c, keep), col(b, kind, c, keep)) if y]
    return f"{statistics.median(r):.2f}x ({min(r):.2f}..{max(r):.2f})" if r else "-"


def stages(who, kind, keep=None):
    """The medians of a slaswitch build's stage cycles per packet (of the rounds in `keep` only
    when given), or None without them."""
    cols = [col(who, kind, c, keep) for c in STAGES.values()]
    return [statistics.median(v) for v in cols] if all(cols) else None


print(f"medians of {rounds} rounds. cyc/pkt: the PMD's cycles per packet (lower is better): of the polls that")
print("brought packets for 1, 10000 and sg; of the whole window, empty polls of all 32 ports included,")
print("for ports32. busy: the forwarding core's share in polls that brought packets. refused: the share")
print("of the generator's frames its ring refused (0: the generator, not the forwarder, set the rate).")
print("kinds: 1 flow; 10000 flows; sg = 10000 flows behind the 100-mask security group; ports32 = 1 flow,")
print("32 ports: 31 vhost-user with 30 idle VMs attached, and the null port (the most Debian's DPDK build holds)")
head = f"{'kind':<8}"
for who in ("testpmd", "slaswitch", "ovs"):
    head += f" | {who:>9} {'Mpps':>6} {'busy':>5} {'ref':>4}"
print(head)
for kind in KINDS:
    line = f"{kind:<8}"
    for who in ("testpmd", "slaswitch", "ovs"):
        line += (f" | {med(who, kind, figure_col(kind)):>9.0f} {med(who, kind, 2):>6.2f} {med(who, kind, 4):>4.0f}%"
                 f" {med(who, kind, 8):>3.0f}%")
    print(line)
print()
print("ratios of cycles per packet, per round, median (range):")
print(f"{'kind':<8} {'slaswitch/testpmd':>22} {'OVS/testpmd':>22} {'OVS/slaswitch':>22}")
for kind in KINDS:
    print(f"{kind:<8} {ratio('slaswitch', 'testpmd', kind):>22} {ratio('ovs', 'testpmd', kind):>22} "
          f"{ratio('ovs', 'slaswitch', kind):>22}")
for who in ("slaswitch", "ovs"):
    extra = [a - b for a, b in zip(col(who, "sg", BUSY), col(who, "10000", BUSY))]
    if extra:
        print(f"the security group's cost after exact-match misses, {who}: {statistics.median(extra):+.0f} "
              f"cycles/packet (sg minus 10000 flows; rounds {min(extra):+.0f}..{max(extra):+.0f})")
for who in ("slaswitch", "ovs"):
    emc, mega = med(who, "sg", 5), med(who, "sg", 6)
    if emc == emc:
        print(f"sg, {who}: exact-match hits {emc:.1f}%, megaflow hits among the rest {mega:.1f}%")
if any(r[0] == "every-pass" for r in rows):
    print()
    print("ports32, slaswitch polling every port every pass (--idle-poll-us 0), as testpmd and OVS poll:")
    print(f"  cyc/pkt {med('every-pass', 'ports32', CORE):.0f}, Mpps {med('every-pass', 'ports32', 2):.2f}; "
          f"every-pass/testpmd {ratio('every-pass', 'testpmd', 'ports32')}, "
          f"OVS/every-pass {ratio('ovs', 'every-pass', 'ports32')}, "
          f"slaswitch/every-pass {ratio('slaswitch', 'every-pass', 'ports32')}")
if any(r[0] == "baseline" for r in rows):
    print()
    print("this build against the baseline, same rounds: cycles per packet this/baseline, median (range)")
    for kind in KINDS:
        print(f"{kind:<8} {ratio('slaswitch', 'baseline', kind)}")
builds = [w for w in ("slaswitch", "baseline") if any(r[0] == w for r in rows)]
if any(stages(w, k) for w in builds for k in KINDS):
    print()
    print("slaswitch's stages, cycles per packet of the busy port (medians: ingress / classify / egress)")
    for kind in KINDS:
        parts = []
        for who in builds:
            s = stages(who, kind)
            parts.append(f"{who} " + (" / ".join(f"{x:.1f}" for x in s) if s else "-"))
        line = f"{kind:<8} " + ", ".join(parts)
        if len(builds) == 2:
            line += f"; classify this/baseline {ratio('slaswitch', 'baseline', kind, STAGES['classify'])}"
        print(line)


def placement_clusters(values):
    """The round trips in groups: sorted, a new group from the first that is more than SPLIT_AT
    times its group's fastest. One placement's round trips lie close together, different
    placements' several times apart."""
    groups = []
    for v in sorted(values):
        if groups and v <= SPLIT_AT * groups[-1][0]:
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def window_placements():
    """Per (kind, contestant), per round, the placement its window sat at (the median round
    trip of its group, in ns) or None when the two ends fell in different groups."""
    groups = placement_clusters([float(p[i]) for p in placements for i in (3, 4)])
    label = lambda v: next(round(statistics.median(g)) for g in groups if g[0] <= v <= g[-1])
    at = {}
    for kind, who, rnd, before, after in placements:
        a, b = label(float(before)), label(float(after))
        at.setdefault((kind, who), {})[int(rnd)] = a if a == b else None
    return groups, at


def quartiles(v):
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    return f"{q[1]:.0f} ({q[0]:.0f}..{q[2]:.0f}, {len(v)})"


if placements:
    groups, at = window_placements()
    whos = [w for w in ("testpmd", "slaswitch", "ovs", "every-pass", "baseline") if any(r[0] == w for r in rows)]
    kept = sum(v is not None for per in at.values() for v in per.values())
    print()
    print("placement of cores 0 and 1: a cache line's round trip between them, measured before and after")
    print("each window with every contestant paused: " + ", ".join(
        f"{round(statistics.median(g))} ns ({len(g)} of {sum(map(len, groups))} readings, {g[0]:.0f}..{g[-1]:.0f})"
        for g in groups))
    print(f"{kept} of {sum(map(len, at.values()))} windows began and ended at one placement. Per placement, the")
    print("cycles per packet of those windows, median (quartiles, windows), and the ratios of the medians:")
    printed = 0
    for kind in KINDS:
        c = figure_col(kind)
        for place in sorted({v for (k, _), per in at.items() if k == kind for v in per.values() if v is not None}):
            cyc = {}
            for who in whos:
                keep = {r for r, v in at.get((kind, who), {}).items() if v == place}
                v = col(who, kind, c, keep)
                if v:
                    cyc[who] = v
            if not all(w in cyc for w in ("testpmd", "slaswitch")):
                continue
            m = {w: statistics.median(v) for w, v in cyc.items()}
            line = f"{kind:<8} {place:>4} ns: " + "; ".join(f"{w} {quartiles(v)}" for w, v in cyc.items())
            line += f"; slaswitch/testpmd {m['slaswitch'] / m['testpmd']:.2f}x"
            if "ovs" in m:
                line += f", OVS/slaswitch {m['ovs'] / m['slaswitch']:.2f}x"
            for w in ("every-pass", "baseline"):
                if w in m:
                    line += f", slaswitch/{w} {m['slaswitch'] / m[w]:.2f}x"
            print(line)
            at_place = [(w, stages(w, kind, {r for r, v in at.get((kind, w), {}).items() if v == place}))
                        for w in ("slaswitch", "every-pass", "baseline")]
            at_place = [f"{w} " + " / ".join(f"{x:.1f}" for x in s) for w, s in at_place if s]
            if at_place:
                print("         stages (ingress / classify / egress): " + ", ".join(at_place))
            printed += 1
    if not printed:
        print("  none: no placement held windows of both slaswitch and testpmd (more rounds give more)")
