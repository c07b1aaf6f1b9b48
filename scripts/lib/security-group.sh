# A security group as a cloud host carries in front of its forwarding rules: 100 drop rules with
# distinct masks (source prefixes /8 to /32, with and without a destination prefix and a TCP
# port). TCP only, so the demos' and benchmarks' UDP traffic passes; it makes classification cost
# what it costs in a cloud (seed 000, Fig. 5c). The text reads the same in slaswitch and ovs-ofctl.
security_group_flows() {
  for bits in $(seq 8 32); do
    echo "priority=100,tcp,nw_src=172.16.0.0/$bits,actions=drop"
    echo "priority=100,tcp,nw_src=172.17.0.0/$bits,tp_dst=$((8000 + bits)),actions=drop"
    echo "priority=100,tcp,nw_src=172.18.0.0/$bits,nw_dst=192.168.0.0/16,actions=drop"
    echo "priority=100,tcp,nw_src=172.19.0.0/$bits,nw_dst=192.168.0.0/16,tp_dst=$((9000 + bits)),actions=drop"
  done
}
