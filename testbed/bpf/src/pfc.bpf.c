// SPDX-License-Identifier: GPL-2.0
/* PFC-style pause for lossless traffic classes, judged on each router's egress class queue at the qdisc
 * enqueue/dequeue tracepoints, signalled through a ring buffer to the controller (testbed/pfc/controller.py).
 *
 * The tracepoints fire for a device's root qdisc (HTB) with the skb. A packet belongs to a lossless class by its
 * DSCP at that router (`classes`, keyed by the router's namespace); its egress queue is the class's HTB leaf,
 * found in HTB's class hash, and the leaf's qstats.backlog is the queue's exact length (per-skb enqueue/dequeue
 * matching drifted here: a few skbs a run left a queue with no dequeue event). Every ingress port that enqueues
 * into a queue sets its bit in the queue's `feeders`. When the backlog passes XOFF, one event names the queue and
 * its feeders (the upstream ports to pause); a new feeder while paused gets its own event; below XON (at a
 * dequeue) one event resumes them. This kernel refuses fentry/fexit (EPERM) and has no kprobes: tracepoints only.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>
#include "htb_leaf.h"

#define XOFF 1
#define XON 0
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define BULK_MAX 64   /* skbs of one bulk dequeue walked (the tracepoint gets the first and their count) */

struct class_key {
	__u32 netns; /* the router's network namespace inode */
	__u32 dscp;
};

struct port_key {
	__u32 netns;
	__u32 ifindex;
};

struct queue_key {
	__u32 netns;
	__u32 ifindex; /* the egress port */
	__u32 minor;   /* the class's HTB minor */
	__u32 pad;
};

struct queue_state {
	__u64 feeders;   /* bits of the ingress ports that enqueued since the last XON */
	__u32 paused;    /* 1 from the XOFF event until the XON event */
	__u32 id;        /* userspace's index of this queue */
	__u32 xoff;
	__u32 xon;
	__u64 peak;      /* the longest the queue was, bytes */
	__u64 crossings; /* XOFF events */
	__u64 lost;      /* events the ring had no room for */
	__u64 no_leaf;   /* packets whose class leaf was not found (the backlog was not judged) */
};

struct event {
	__u64 ts;      /* bpf_ktime_get_ns at the crossing (CLOCK_MONOTONIC) */
	__u64 feeders; /* XOFF: the ingress bits to pause */
	__u32 backlog;
	__u32 id;
	__u32 kind;    /* XOFF or XON */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct class_key);
	__type(value, __u32); /* the class's HTB minor */
} classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct port_key);
	__type(value, __u32); /* the ingress port's bit at its router (0..63) */
} ingress SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct queue_key);
	__type(value, struct queue_state);
} queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

static __always_inline int dscp_of(struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 b[2] = {};

	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return -1;
	if (bpf_probe_read_kernel(b, 2, skb->head + skb->network_header))
		return -1;
	return proto == ETH_P_IP ? b[1] >> 2 : ((b[0] & 0xf) << 2) | (b[1] >> 6);
}

/* The lossless queue this packet is in at this port, with its key; 0 when it is not one. */
static __always_inline struct queue_state *queue_of(struct sk_buff *skb, struct net_device *dev,
						      struct queue_key *qk)
{
	struct class_key ck = {};
	__u32 *minor;
	int dscp = dscp_of(skb);

	if (dscp < 0)
		return 0;
	ck.netns = dev->nd_net.net->ns.inum;
	ck.dscp = dscp;
	minor = bpf_map_lookup_elem(&classes, &ck);
	if (!minor)
		return 0;
	qk->netns = ck.netns;
	qk->ifindex = dev->ifindex;
	qk->minor = *minor;
	return bpf_map_lookup_elem(&queues, qk);
}

static __always_inline void emit(struct queue_state *st, __u32 kind, __u64 feeders, __s64 backlog)
{
	struct event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

	if (!ev) {
		__sync_fetch_and_add(&st->lost, 1);
		return;
	}
	ev->ts = bpf_ktime_get_ns();
	ev->feeders = feeders;
	ev->backlog = backlog;
	ev->id = st->id;
	ev->kind = kind;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, 0);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(pfc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct queue_key qk = {};
	struct port_key pk = {};
	struct queue_state *st = queue_of(skb, txq->dev, &qk);
	__u64 bit = 0, before;
	__u32 *b;
	__s64 backlog;

	if (!st)
		return 0;
	pk.netns = qk.netns;
	pk.ifindex = skb->skb_iif;
	b = pk.ifindex ? bpf_map_lookup_elem(&ingress, &pk) : 0;
	if (b)
		bit = 1ULL << (*b & 63);
	before = bit ? __sync_fetch_and_or(&st->feeders, bit) : st->feeders;
	backlog = leaf_backlog(q, qk.minor);
	if (backlog < 0) {
		__sync_fetch_and_add(&st->no_leaf, 1);
		return 0;
	}
	if (backlog > st->peak)
		st->peak = backlog; /* racy between CPUs by design: a statistic, not a threshold */
	if (st->paused) {
		if (bit && !(before & bit))
			emit(st, XOFF, bit, backlog); /* a new feeder while paused: pause it too */
	} else if (backlog > st->xoff && __sync_val_compare_and_swap(&st->paused, 0, 1) == 0) {
		__sync_fetch_and_add(&st->crossings, 1);
		emit(st, XOFF, before | bit, backlog);
	}
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(pfc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct sk_buff *s = skb;

	for (int i = 0; i < BULK_MAX && i < packets && s; i++) {
		struct queue_key qk = {};
		struct queue_state *st = queue_of(s, txq->dev, &qk);

		s = s->next;
		if (!st || !st->paused)
			continue;
		__s64 backlog = leaf_backlog(q, qk.minor);

		if (backlog >= 0 && backlog < st->xon && __sync_val_compare_and_swap(&st->paused, 1, 0) == 1) {
			__sync_lock_test_and_set(&st->feeders, 0);
			emit(st, XON, 0, backlog);
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
