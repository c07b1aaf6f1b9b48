/* Receiving from a vhost port through the vhost library directly, not through net_vhost's
 * ethdev rx (which adds an ethdev call, per-frame bookkeeping and a flag handshake per burst to
 * every poll).
 *
 * The vhost library frees a guest's device after its destroy_device callback returns; that
 * callback must make sure no thread is still inside rte_vhost_dequeue_burst for it. net_vhost's
 * destroy_device raises a link-down event before returning, so the event's callback here takes
 * the device away from the port and waits until the PMD has passed a poll that saw it
 * gone: a quiescent-state handshake, as in DPDK's RCU library, with plain loads and stores on
 * the PMD's side. The contract with the caller: a port is attached only after it has started,
 * and detached (ss_eth_stop_close does it) once no PMD polls it, before it stops. */

/* rte_eth_dev_conf_get, which tells what the port's rx was configured to do, is experimental
 * in 22.11; the shim builds against that release only. */
#define ALLOW_EXPERIMENTAL_API

#include <stdint.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eth_vhost.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_spinlock.h>
#include <rte_vhost.h>

/* The guest's transmit ring of queue pair q is the device's virtqueue 2q+1. */
#define GUEST_TX_RING(q) ((uint16_t)(2 * (q) + 1))

struct vhost_rx {
    /* Read by the PMD on every poll; written under `lock`. */
    int dev;                  /* the guest's vhost device's vid + 1; 0: none, nothing received */
    uint64_t token;           /* bumped (release) each time a device is taken away */
    struct rte_mempool *pool; /* where received frames' mbufs come from */
    /* Control side only. */
    uint32_t attached;        /* a PMD may poll the port through ss_vhost_rx_burst */
    rte_spinlock_t lock;      /* orders attach, detach and the link events */
    /* Written by the PMD on every poll, on its own cache line: the last token it saw. */
    uint64_t seen __rte_cache_aligned;
} __rte_cache_aligned;

static struct vhost_rx vhost_rx[RTE_MAX_ETHPORTS];

/* The port's device as the link now says: its vid + 1 once a guest's device is up, else 0.
 * Only for a started port (before that net_vhost's queues hold no vid). */
static int current_dev(uint16_t port) {
    struct rte_eth_link link;
    if (rte_eth_link_get_nowait(port, &link) < 0 || link.link_status != RTE_ETH_LINK_UP) return 0;
    int vid = rte_eth_vhost_get_vid_from_port_id(port);
    return vid < 0 ? 0 : vid + 1;
}

/* Waits until the PMD polling `s` has seen `token`, or the port is detached. */
static void wait_quiescent(struct vhost_rx *s, uint16_t port, uint64_t token) {
    uint64_t hz = rte_get_timer_hz(), next_note = rte_get_timer_cycles() + hz;
    while (__atomic_load_n(&s->attached, __ATOMIC_ACQUIRE) && __atomic_load_n(&s->seen, __ATOMIC_ACQUIRE) < token) {
        rte_pause();
        if (rte_get_timer_cycles() > next_note) {
            RTE_LOG(WARNING, USER1, "vhost port %u: still waiting for its PMD to leave the guest's device\n", port);
            next_note += hz;
        }
    }
}

/* Follows the port's link: a device that went away is taken from the PMD before the vhost
 * library frees it; a new one is handed over. */
static int link_event(uint16_t port, enum rte_eth_event_type type, void *arg, void *out) {
    (void)type, (void)arg, (void)out;
    struct vhost_rx *s = &vhost_rx[port];
    uint64_t wait_for = 0;
    rte_spinlock_lock(&s->lock);
    if (s->attached) {
        int dev = current_dev(port), old = __atomic_load_n(&s->dev, __ATOMIC_RELAXED);
        __atomic_store_n(&s->dev, dev, __ATOMIC_RELEASE);
        /* A poll that sees the bumped token sees `dev`, not `old`. */
        if (old != 0 && dev != old) wait_for = __atomic_add_fetch(&s->token, 1, __ATOMIC_RELEASE);
    }
    rte_spinlock_unlock(&s->lock);
    /* Outside the lock: a detach (the PMD no longer polls the port) must not wait for us. */
    if (wait_for) wait_quiescent(s, port, wait_for);
    return 0;
}

/* Makes `port` (a started net_vhost port) receive through ss_vhost_rx_burst, its mbufs from
 * `pool`. -ENOTSUP when net_vhost's own rx would do more than hand frames over (complete
 * checksums, strip VLAN tags): the port then keeps ethdev rx. */
int ss_vhost_rx_attach(uint16_t port, struct rte_mempool *pool) {
    struct rte_eth_dev_info info;
    struct rte_eth_conf conf;
    if (port >= RTE_MAX_ETHPORTS || rte_eth_dev_info_get(port, &info) < 0 || rte_eth_dev_conf_get(port, &conf) < 0)
        return -EINVAL;
    if (strcmp(info.driver_name, "net_vhost") != 0) return -ENOTSUP;
    /* net_vhost completes checksums itself when it offers the checksum offloads (its compliant
     * offload flags) and the port asked for neither; and strips VLAN tags when asked to. */
    const uint64_t l4 = RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
    int sw_checksums = (info.rx_offload_capa & l4) != 0 && (conf.rxmode.offloads & l4) == 0;
    if (sw_checksums || (conf.rxmode.offloads & RTE_ETH_RX_OFFLOAD_VLAN_STRIP)) return -ENOTSUP;
    struct vhost_rx *s = &vhost_rx[port];
    int rc = rte_eth_dev_callback_register(port, RTE_ETH_EVENT_INTR_LSC, link_event, NULL);
    if (rc < 0) return rc;
    rte_spinlock_lock(&s->lock);
    s->pool = pool;
    __atomic_store_n(&s->seen, __atomic_load_n(&s->token, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    __atomic_store_n(&s->attached, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&s->dev, current_dev(port), __ATOMIC_RELEASE);
    rte_spinlock_unlock(&s->lock);
    return 0;
}

/* No PMD polls `port` any more: its link events need not wait for one. A port never attached
 * is left as it is. */
void ss_vhost_rx_detach(uint16_t port) {
    if (port >= RTE_MAX_ETHPORTS) return;
    struct vhost_rx *s = &vhost_rx[port];
    rte_spinlock_lock(&s->lock);
    uint32_t was = s->attached;
    __atomic_store_n(&s->attached, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&s->dev, 0, __ATOMIC_RELAXED);
    rte_spinlock_unlock(&s->lock);
    /* A callback running now finds the port detached; one registered again later is the same. */
    if (was) rte_eth_dev_callback_unregister(port, RTE_ETH_EVENT_INTR_LSC, link_event, NULL);
}

/* Receives up to `n` frames the guest sent on rx queue `queue` of an attached port. Passing
 * here is the PMD's quiescent state for the port: it is inside no device of it. */
uint16_t ss_vhost_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    if (unlikely(port >= RTE_MAX_ETHPORTS)) return 0;
    struct vhost_rx *s = &vhost_rx[port];
    uint64_t token = __atomic_load_n(&s->token, __ATOMIC_ACQUIRE);
    __atomic_store_n(&s->seen, token, __ATOMIC_RELEASE);
    int dev = __atomic_load_n(&s->dev, __ATOMIC_RELAXED);
    if (unlikely(dev == 0)) return 0;
    return rte_vhost_dequeue_burst(dev - 1, GUEST_TX_RING(queue), s->pool, pkts, n);
}
