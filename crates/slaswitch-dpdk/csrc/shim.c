/* The narrow C shim between slaswitch and DPDK 22.11.
 *
 * DPDK's fast-path API is made of static inline functions and macros that Rust cannot call;
 * this file wraps the ones slaswitch uses, with plain C signatures. The only state kept here is
 * vhost_rx.c's, for receiving from vhost ports. Every other crate reaches DPDK only through
 * src/lib.rs of this crate. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rte_bus_vdev.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_vhost.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_vhost.h>

/* Offsets of the mbuf fields the Rust side reads directly on the hot path; checked at start. */
struct ss_mbuf_layout {
    uint32_t size, buf_addr, data_off, pkt_len, data_len, nb_segs, next, pool, ol_flags;
    /* The offload flags the Rust side reads and sets (rte_mbuf_core.h). */
    uint64_t rx_lro, rx_l4_cksum_mask, rx_l4_cksum_none, tx_tcp_seg, tx_tcp_cksum, tx_udp_cksum,
        tx_ip_cksum, tx_ipv4, tx_ipv6;
};

void ss_mbuf_layout(struct ss_mbuf_layout *l) {
    l->size = sizeof(struct rte_mbuf);
    l->buf_addr = offsetof(struct rte_mbuf, buf_addr);
    l->data_off = offsetof(struct rte_mbuf, data_off);
    l->pkt_len = offsetof(struct rte_mbuf, pkt_len);
    l->data_len = offsetof(struct rte_mbuf, data_len);
    l->nb_segs = offsetof(struct rte_mbuf, nb_segs);
    l->next = offsetof(struct rte_mbuf, next);
    l->pool = offsetof(struct rte_mbuf, pool);
    l->ol_flags = offsetof(struct rte_mbuf, ol_flags);
    l->rx_lro = RTE_MBUF_F_RX_LRO;
    l->rx_l4_cksum_mask = RTE_MBUF_F_RX_L4_CKSUM_MASK;
    l->rx_l4_cksum_none = RTE_MBUF_F_RX_L4_CKSUM_NONE;
    l->tx_tcp_seg = RTE_MBUF_F_TX_TCP_SEG;
    l->tx_tcp_cksum = RTE_MBUF_F_TX_TCP_CKSUM;
    l->tx_udp_cksum = RTE_MBUF_F_TX_UDP_CKSUM;
    l->tx_ip_cksum = RTE_MBUF_F_TX_IP_CKSUM;
    l->tx_ipv4 = RTE_MBUF_F_TX_IPV4;
    l->tx_ipv6 = RTE_MBUF_F_TX_IPV6;
}

/* The segment size a received TCP segment (RTE_MBUF_F_RX_LRO) is to be cut at. */
uint16_t ss_mbuf_tso_segsz(const struct rte_mbuf *m) { return m->tso_segsz; }

/* Asks the port the mbuf goes to for offloads: header lengths, segment size, TX flags. */
void ss_mbuf_set_tx_offload(struct rte_mbuf *m, uint8_t l2, uint16_t l3, uint8_t l4, uint16_t segsz,
                            uint64_t flags) {
    m->l2_len = l2;
    m->l3_len = l3;
    m->l4_len = l4;
    m->tso_segsz = segsz;
    m->ol_flags |= flags;
}

/* The virtio features the guest on vhost port `port` negotiated; 0 while none is connected. */
uint64_t ss_vhost_features(uint16_t port) {
    uint64_t features = 0;
    int vid = rte_eth_vhost_get_vid_from_port_id(port);
    if (vid < 0 || rte_vhost_get_negotiated_features(vid, &features) < 0) return 0;
    return features;
}

int ss_eal_init(int argc, char **argv) { return rte_eal_init(argc, argv); }
int ss_eal_cleanup(void) { return rte_eal_cleanup(); }
int ss_errno(void) { return rte_errno; }
const char *ss_strerror(int err) { return rte_strerror(err); }

uint64_t ss_rdtsc(void) { return rte_rdtsc(); }
uint64_t ss_tsc_hz(void) { return rte_get_tsc_hz(); }

/* Non-EAL threads (our PMD threads) register to get an lcore id, so mempool caches work. */
int ss_thread_register(void) { return rte_thread_register(); }
void ss_thread_unregister(void) { rte_thread_unregister(); }
unsigned ss_lcore_id(void) { return rte_lcore_id(); }

struct rte_mempool *ss_pktmbuf_pool_create(const char *name, unsigned n, unsigned cache_size,
                                           uint16_t data_room, int socket_id) {
    return rte_pktmbuf_pool_create(name, n, cache_size, 0, data_room, socket_id);
}
void ss_mempool_free(struct rte_mempool *mp) { rte_mempool_free(mp); }
unsigned ss_mempool_avail(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }

int ss_vdev_create(const char *name, const char *args) { return rte_vdev_init(name, args); }
unsigned ss_max_eth_ports(void) { return RTE_MAX_ETHPORTS; }
unsigned ss_eth_dev_count_total(void) { return rte_eth_dev_count_total(); }
int ss_vdev_remove(const char *name) { return rte_vdev_uninit(name); }

int ss_eth_port_by_name(const char *name, uint16_t *port_id) {
    return rte_eth_dev_get_port_by_name(name, port_id);
}

/* The largest MTU the port's driver takes, as ethdev checks it: its frame length limit less
 * its overhead (Ethernet header and CRC unless the driver says otherwise). */
static uint16_t max_mtu_of(const struct rte_eth_dev_info *info) {
    uint32_t overhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    if (info->max_mtu != UINT16_MAX && info->max_rx_pktlen > info->max_mtu)
        overhead = info->max_rx_pktlen - info->max_mtu;
    uint32_t by_len = info->max_rx_pktlen > overhead ? info->max_rx_pktlen - overhead : 0;
    uint32_t max = by_len < info->max_mtu ? by_len : info->max_mtu;
    return max > UINT16_MAX ? UINT16_MAX : (uint16_t)max;
}

int ss_eth_max_mtu(uint16_t port) {
    struct rte_eth_dev_info info;
    int rc = rte_eth_dev_info_get(port, &info);
    return rc < 0 ? rc : (int)max_mtu_of(&info);
}

/* Configures `queues` rx and tx queues, starts the port and makes it promiscuous. With
 * `l4_csum_rx`, the port is told the switch takes partial TCP/UDP checksums itself (a vhost
 * port then leaves them partial instead of completing every one in software); `mtu` (0: the
 * device's own) is given to the device. */
int ss_eth_setup(uint16_t port, uint16_t nb_rxd, uint16_t nb_txd, struct rte_mempool *mp, int l4_csum_rx,
                 uint16_t mtu, uint16_t queues) {
    struct rte_eth_conf conf;
    struct rte_eth_dev_info info;
    memset(&conf, 0, sizeof(conf));
    int rc = rte_eth_dev_info_get(port, &info);
    if (rc < 0) return rc;
    if (l4_csum_rx)
        conf.rxmode.offloads = info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    /* Frames longer than one mbuf arrive chained (where the driver can) and leave chained. */
    conf.rxmode.offloads |= info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER;
    conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    if (mtu > max_mtu_of(&info) || (mtu != 0 && mtu < info.min_mtu)) return -EINVAL;
    conf.rxmode.mtu = mtu;
    rc = rte_eth_dev_configure(port, queues, queues, &conf);
    if (rc < 0) return rc;
    /* The kernel side of a tap or af_packet port takes the MTU too; devices without an MTU
     * (vhost, null) keep none (the switch enforces the MTU on what it sends either way). */
    if (mtu != 0) {
        rc = rte_eth_dev_set_mtu(port, mtu);
        if (rc < 0 && rc != -ENOTSUP) return rc;
    }
    rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
    if (rc < 0) return rc;
    int socket = rte_eth_dev_socket_id(port);
    if (socket < 0) socket = (int)rte_socket_id();
    for (uint16_t q = 0; q < queues; q++) {
        rc = rte_eth_rx_queue_setup(port, q, nb_rxd, (unsigned)socket, NULL, mp);
        if (rc < 0) return rc;
        rc = rte_eth_tx_queue_setup(port, q, nb_txd, (unsigned)socket, NULL);
        if (rc < 0) return rc;
    }
    rc = rte_eth_dev_start(port);
    if (rc < 0) return rc;
    rte_eth_promiscuous_enable(port);
    return 0;
}

void ss_vhost_rx_detach(uint16_t port);

int ss_eth_stop_close(uint16_t port) {
    ss_vhost_rx_detach(port);
    int rc = rte_eth_dev_stop(port);
    int rc2 = rte_eth_dev_close(port);
    return rc < 0 ? rc : rc2;
}

int ss_eth_mac(uint16_t port, uint8_t mac[6]) {
    struct rte_ether_addr a;
    int rc = rte_eth_macaddr_get(port, &a);
    if (rc == 0) memcpy(mac, a.addr_bytes, 6);
    return rc;
}

/* 1 when the link is up, 0 when down, negative on error. */
int ss_eth_link_up(uint16_t port) {
    struct rte_eth_link link;
    int rc = rte_eth_link_get_nowait(port, &link);
    return rc < 0 ? rc : link.link_status;
}

struct ss_eth_stats { uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf; };
int ss_eth_stats(uint16_t port, struct ss_eth_stats *s) {
    struct rte_eth_stats st;
    int rc = rte_eth_stats_get(port, &st);
    if (rc < 0) return rc;
    s->ipackets = st.ipackets; s->opackets = st.opackets; s->ibytes = st.ibytes; s->obytes = st.obytes;
    s->imissed = st.imissed; s->ierrors = st.ierrors; s->oerrors = st.oerrors; s->rx_nombuf = st.rx_nombuf;
    return 0;
}

uint16_t ss_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_rx_burst(port, queue, pkts, n);
}
uint16_t ss_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_tx_burst(port, queue, pkts, n);
}

int ss_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned n) {
    return rte_pktmbuf_alloc_bulk(mp, pkts, n);
}
void ss_pktmbuf_free_bulk(struct rte_mbuf **pkts, unsigned n) { rte_pktmbuf_free_bulk(pkts, n); }
void ss_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
/* A copy of a packet (for flooding to several ports); NULL when the pool is empty. */
struct rte_mbuf *ss_pktmbuf_copy(struct rte_mbuf *m, struct rte_mempool *mp) {
    return rte_pktmbuf_copy(m, mp, 0, UINT32_MAX);
}
/* Makes a freshly allocated mbuf hold `len` bytes in one segment; -1 if it does not fit. */
int ss_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len) {
    if (len > rte_pktmbuf_tailroom(m) + m->data_len) return -1;
    m->data_len = len;
    m->pkt_len = len;
    return 0;
}
/* Makes a chained mbuf contiguous; 0 on success. */
int ss_pktmbuf_linearize(struct rte_mbuf *m) { return rte_pktmbuf_linearize(m); }

/* PCI (or any bus) device by devargs, for `dpdk` ports. */
int ss_dev_probe(const char *devargs) { return rte_dev_probe(devargs); }
int ss_eth_dev_remove(uint16_t port) {
    struct rte_eth_dev_info info;
    int rc = rte_eth_dev_info_get(port, &info);
    if (rc < 0) return rc;
    return rte_dev_remove(info.device);
}
