// SPDX-License-Identifier: GPL-2.0
/* Queue telemetry where the packets are: qdisc enqueue/dequeue tracepoints (tp_btf), per port and time slot.
 *
 * Only the run's ports count: userspace gives each a netdev group that names its id (see port_cfg). Both
 * tracepoints fire for the device's root qdisc (HTB here), under its lock, so one port's state is never
 * written by two CPUs at once. An event in a new slot closes the open one: it is copied into the port's ring
 * (an mmapable array that userspace reads in bulk) and its head advances. An idle port costs nothing.
 *
 * Per slot: root backlog max/min after each event, bytes and packets enqueued and dequeued, drops (the root's
 * qstats.drops delta: a drop fires no enqueue event, the next event sees it), CE marks set at this port (the eBPF
 * marker flags the packets it turns CE in skb->mark, see QT_MARK_CE; kernel RED's marks need the ECN field from
 * before the qdisc, see ecn_before), and a log2 histogram of sojourn times (enqueue to dequeue, per packet).
 * Per port, for the direct fidelity check: the gap between consecutive dequeues while the queue stayed busy, minus
 * the ideal transmission time of the packet that left first (len x 8 / rate), in a histogram, and the count of gaps
 * late by at least the port's late_ns (userspace sets one frame time).
 *
 * Cost: fields are read by direct BTF loads (no helper call; the skb's shared info through bpf_rdonly_cast where the
 * kernel has it, 6.2 on; the object built with QT_PROBE_READ reads it with a helper for older kernels); enqueue
 * times sit in a per-port ring in enqueue order (the ports' qdiscs are FIFO), so a dequeue finds its
 * packet's time by index, not in a hash.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define MAX_PORTS 256
#define SOJ_BUCKETS 16 /* bucket b: sojourn < 2^b us (b = 0: < 1 us); the last one is open */
#define GAP_BUCKETS 32 /* 16 negative (early) then 16 positive (late) log2-us buckets */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ECN_CE 3
#define BULK_MAX 64
#define QT_MARK_CE 0x80000000U /* skb->mark bit: the eBPF marker turned this packet CE (marker.bpf.c) */
#define FIFO_N 4096            /* enqueue times per port: more packets queued than this are counted as missed */
#define FIFO_LOOKAHEAD 4       /* ring positions past the expected one a dequeued skb may sit at (see enqueued_at) */
#define SLOT_SOJ 0x80000000U   /* slot.port: the slot counted a sojourn, so its histogram line was written */
#define CFG_STASH 1            /* qt_cfg.flags: the ECN stash hooks are attached (a port marks with kernel RED) */

/* Which port a device is: userspace sets each port's netdev group to group_base + its id (IFLA_GROUP), so an event
 * finds its port by two loads and an array index, then checks the namespace and ifindex (another run's devices may
 * carry the same groups). A hash lookup by (netns, ifindex) cost 70-110 ns per event. */
struct port_cfg {
	__u32 netns;   /* network namespace inode: 0 for an unused id */
	__u32 ifindex;
	__u64 ns_per_byte_q16; /* transmission time of a byte at the port's rate, in ns x 2^16 (0: rate unknown) */
	__u64 late_ns; /* a dequeue gap this much over the ideal counts in gap_late (one frame time; 0: not counted) */
};

/* 128 bytes: a cache line of counts, then one of the sojourn histogram, which a slot without a sojourn counted
 * leaves unwritten in the ring (SLOT_SOJ unset: the reader reads zeros). Each line written costs a miss. */
struct slot {
	__u64 slot;   /* time slot number: ktime ns / slot_ns */
	__u32 port;   /* the port id, with SLOT_SOJ */
	__u32 late;   /* dequeue gaps in this slot late by the port's late_ns (the gap check's, by time) */
	__u32 backlog_max;
	__u32 backlog_min;
	__u32 qlen_max;
	__u32 drops;
	__u64 enq_bytes;
	__u64 deq_bytes;
	__u32 enq_pkts;
	__u32 deq_pkts;
	__u32 marks;
	__u32 backlog_last; /* root backlog after the slot's last event: the queue holds it until the next event */
	__u32 soj[SOJ_BUCKETS];
};

struct port_state {
	struct slot cur;      /* the open slot */
	__u64 head;           /* slots closed into the ring so far */
	__u64 drops_seen;     /* root qstats.drops at the last event */
	__u64 last_deq_ns;
	__u64 last_deq_len;
	__u32 last_backlog;   /* root backlog after the last dequeue */
	__u32 started;
	__u64 gap[GAP_BUCKETS];
	__u64 gap_n;
	__u64 gap_sum_abs_ns;
	__u64 soj_total[SOJ_BUCKETS];
	__u64 soj_max_ns;
	__u64 enq_seen;
	__u64 deq_seen;
	__u64 marks_seen;
	__u64 fifo_enq;       /* skbs put in this port's enqueue-time ring */
	__u64 last_deq_skb;   /* the last skb dequeued: one requeued by the driver leaves twice */
	__u64 soj_miss;       /* dequeued skbs whose enqueue time was not found (no sojourn counted) */
	__u64 last_enq_ts;    /* enqueue time of the last skb matched: FIFO order never goes back in time */
	__u64 gap_late;       /* gaps late by at least the port's late_ns */
	__u64 gso_skbs;       /* skbs enqueued that were more than one packet (GSO): a queue of superpackets */
};

struct fifo_ent {
	__u64 skb;
	__u64 ts;
};

struct qt_cfg {
	__u64 slot_ns;
	__u32 ring_slots; /* per port, a power of two */
	__u32 flags;      /* CFG_STASH */
	__u32 group_base; /* port id = device group - group_base */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qt_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_cfg);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_state);
} state SEC(".maps");

/* max_entries is set by the loader: ports x ring_slots */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slot);
} ring SEC(".maps");

/* max_entries is set by the loader: ports x FIFO_N */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fifo_ent);
} fifo SEC(".maps");

struct pre {
	__u64 skb;
	__u32 ecn;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 0: on arrival, 1: at net_dev_queue */
	__type(key, __u32);
	__type(value, struct pre);
} pre_ecn SEC(".maps");

static __always_inline int ecn_of(struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u8 b[2] = {};

	if (proto == ETH_P_IP) {
		if (bpf_probe_read_kernel(b, 2, head + nh))
			return -1;
		return b[1] & 3;
	}
	if (proto == ETH_P_IPV6) {
		if (bpf_probe_read_kernel(b, 2, head + nh))
			return -1;
		return (b[1] >> 4) & 3;
	}
	return -1;
}

#ifndef QT_PROBE_READ
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#endif

/* Packets as tc counts them: a GSO skb (GRO on a veth receive makes them) is gso_segs packets. (Judging by length
 * against the MTU is not enough: tc counted 0.5 % more packets than that.) */
static __always_inline __u32 segs_of(struct sk_buff *skb)
{
	struct skb_shared_info *si;
	__u16 segs = 0;

	si = (void *)(skb->head + skb->end);
#ifdef QT_PROBE_READ
	if (bpf_probe_read_kernel(&segs, sizeof(segs), &si->gso_segs))
		return 1;
#else
	si = bpf_rdonly_cast(si, bpf_core_type_id_kernel(struct skb_shared_info));
	segs = si->gso_segs;
#endif
	return segs ? segs : 1;
}

static __always_inline struct port_cfg *port_of(struct net_device *dev, __u32 *id)
{
	__u32 zero = 0;
	struct qt_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	struct port_cfg *p;

	if (!dev || !c)
		return 0;
	*id = dev->group - c->group_base;
	if (*id >= MAX_PORTS)
		return 0;
	p = bpf_map_lookup_elem(&ports, id);
	if (!p || p->ifindex != dev->ifindex || p->netns != dev->nd_net.net->ns.inum)
		return 0;
	return p;
}

/* floor(log2(v)) + 1 for v > 0, 0 for v = 0 (bucket b holds values below 2^b), capped at n - 1 */
static __always_inline __u32 log2_bucket(__u64 v, __u32 n)
{
	__u32 b = 0;

	if (v >> 32) { v >>= 32; b += 32; }
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { v >>= 1; b += 1; }
	b += (__u32)v;
	b = b < n ? b : n - 1;
	asm volatile("%0 &= 63" : "+r"(b)); /* a bound the verifier sees (clang folds a C mask into the select) */
	return b;
}

/* The open slot for `now`: close the previous one into the ring when `now` is in a later slot. */
static __always_inline struct port_state *slot_for(__u32 id, __u64 now, __u32 backlog)
{
	struct port_state *st = bpf_map_lookup_elem(&state, &id);
	__u32 zero = 0;
	struct qt_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	__u32 ring_slots;
	__u64 s;

	if (!st || !c || !c->slot_ns || !c->ring_slots)
		return 0;
	ring_slots = c->ring_slots;
	s = now / c->slot_ns;
	if (st->started && st->cur.slot != s) {
		__u32 idx = id * ring_slots + (__u32)(st->head & (ring_slots - 1));
		struct slot *dst = bpf_map_lookup_elem(&ring, &idx);

		if (dst) {
			__builtin_memcpy(dst, &st->cur, offsetof(struct slot, soj));
			if (st->cur.port & SLOT_SOJ)
				__builtin_memcpy(dst->soj, st->cur.soj, sizeof(dst->soj));
		}
		__sync_fetch_and_add(&st->head, 1); /* after the copy: the reader trusts slots below head */
		st->started = 0;
	}
	if (!st->started) {
		__builtin_memset(&st->cur, 0, sizeof(st->cur));
		st->cur.slot = s;
		st->cur.port = id;
		st->cur.backlog_min = backlog;
		st->started = 1;
	}
	return st;
}

static __always_inline void account(struct port_state *st, struct Qdisc *q, __u32 backlog)
{
	__u64 drops = q->qstats.drops;
	__u32 qlen = q->q.qlen;

	if (backlog > st->cur.backlog_max)
		st->cur.backlog_max = backlog;
	if (backlog < st->cur.backlog_min)
		st->cur.backlog_min = backlog;
	if (qlen > st->cur.qlen_max)
		st->cur.qlen_max = qlen;
	st->cur.backlog_last = backlog;
	if (st->enq_seen + st->deq_seen && drops > st->drops_seen)
		st->cur.drops += drops - st->drops_seen; /* the first event sets the baseline */
	st->drops_seen = drops;
}

/* The ECN field before this node marks: on arrival (forwarded packets: before the egress clsact hook, where the
 * eBPF marker marks, and the qdisc, where RED does), else at net_dev_queue (a host's own packets: after clsact,
 * so only RED's marks count there). Per CPU: receive, forwarding and enqueue run in one softirq on one CPU.
 * This kernel has no kprobe PMU or tracefs and refuses fentry on __dev_queue_xmit (EPERM): tracepoints only. */
static __always_inline void stash(__u32 which, struct sk_buff *skb)
{
	struct pre *p = bpf_map_lookup_elem(&pre_ecn, &which);

	if (p) {
		p->skb = (__u64)skb;
		p->ecn = ecn_of(skb);
	}
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(qt_receive, struct sk_buff *skb)
{
	stash(0, skb);
	return 0;
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(qt_dev_queue, struct sk_buff *skb)
{
	stash(1, skb);
	return 0;
}

static __always_inline int ecn_before(struct sk_buff *skb)
{
	__u32 rx = 0, tx = 1;
	struct pre *p = bpf_map_lookup_elem(&pre_ecn, &rx);

	if (p && p->skb == (__u64)skb)
		return p->ecn;
	p = bpf_map_lookup_elem(&pre_ecn, &tx);
	if (p && p->skb == (__u64)skb)
		return p->ecn;
	return -1;
}

/* One event at a port of the run: the port's state with its open slot for now, accounted; 0 for other ports */
static __always_inline struct port_state *event(struct Qdisc *q, struct net_device *dev, struct port_cfg **cfg,
						__u32 *id, __u64 *now, __u32 *backlog)
{
	struct port_state *st;

	*cfg = port_of(dev, id);
	if (!*cfg)
		return 0;
	*now = bpf_ktime_get_ns();
	*backlog = q->qstats.backlog;
	st = slot_for(*id, *now, *backlog);
	if (st)
		account(st, q, *backlog);
	return st;
}

/* CE set at this node: flagged by the eBPF marker, or (kernel RED, stash hooks attached) CE now and not before */
static __always_inline int marked_here(struct sk_buff *skb)
{
	__u32 zero = 0;
	struct qt_cfg *c;
	int before;

	if (skb->mark & QT_MARK_CE)
		return 1;
	c = bpf_map_lookup_elem(&cfg, &zero);
	if (!c || !(c->flags & CFG_STASH))
		return 0;
	before = ecn_before(skb);
	return before >= 0 && before != ECN_CE && ecn_of(skb) == ECN_CE;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(qt_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct net_device *dev = txq->dev;
	struct port_cfg *cfg;
	struct fifo_ent *e;
	__u64 now;
	__u32 id, backlog, segs, idx;
	struct port_state *st = event(q, dev, &cfg, &id, &now, &backlog);

	if (!st)
		return 0;
	segs = segs_of(skb);
	st->cur.enq_pkts += segs;
	st->cur.enq_bytes += skb->len;
	st->enq_seen += segs;
	if (segs > 1)
		st->gso_skbs++;
	if (marked_here(skb)) {
		st->cur.marks += segs;
		st->marks_seen += segs;
	}
	idx = id * FIFO_N + (__u32)(st->fifo_enq & (FIFO_N - 1));
	e = bpf_map_lookup_elem(&fifo, &idx);
	if (e) {
		e->skb = (__u64)skb;
		e->ts = now;
	}
	st->fifo_enq++;
	return 0;
}

static __always_inline struct fifo_ent *fifo_at(__u32 id, __u64 pos)
{
	__u32 idx = id * FIFO_N + (__u32)(pos & (FIFO_N - 1));

	return bpf_map_lookup_elem(&fifo, &idx);
}

/* The enqueue time of the skb leaving now, 0 if not found. The queue is FIFO, so after a dequeue of n skbs with
 * qlen still queued, skb i of the n was put in the ring at fifo_enq - qlen - n + i. Computing the position from the
 * queue's own length, rather than keeping a read pointer, cannot drift: a skb whose enqueue fired no event (qlen
 * counts it, the ring does not) shifts the ones behind it by one, hence the few positions of look-ahead. */
static __always_inline __u64 enqueued_at(struct port_state *st, __u32 id, struct sk_buff *skb, __u64 pos)
{
	struct fifo_ent *e;

	if ((__u64)skb == st->last_deq_skb)
		return 0; /* requeued and dequeued again: its sojourn was counted the first time */
	st->last_deq_skb = (__u64)skb;
	for (int j = 0; j < FIFO_LOOKAHEAD; j++) {
		if (pos + j >= st->fifo_enq || st->fifo_enq - (pos + j) > FIFO_N)
			break; /* not enqueued yet, or overwritten by later enqueues */
		e = fifo_at(id, pos + j);
		/* an older entry with the same pointer is a freed skb's, reused: not this one */
		if (e && e->skb == (__u64)skb && e->ts >= st->last_enq_ts) {
			st->last_enq_ts = e->ts;
			return e->ts;
		}
	}
	st->soj_miss++;
	return 0;
}

static __always_inline void dequeued(struct port_state *st, __u32 id, struct sk_buff *skb, struct net_device *dev,
				     __u64 now, __u64 pos)
{
	__u64 t0, soj;
	__u32 b, segs = segs_of(skb);

	st->cur.deq_pkts += segs;
	st->cur.deq_bytes += skb->len;
	st->deq_seen += segs;
	t0 = enqueued_at(st, id, skb, pos);
	if (!t0)
		return;
	soj = now > t0 ? now - t0 : 0;
	b = log2_bucket(soj / 1000, SOJ_BUCKETS);
	if (b < SOJ_BUCKETS) {
		st->cur.soj[b]++;
		st->soj_total[b]++;
		st->cur.port |= SLOT_SOJ;
	}
	if (soj > st->soj_max_ns)
		st->soj_max_ns = soj;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(qt_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct net_device *dev = txq->dev;
	struct port_cfg *cfg;
	struct port_state *st;
	struct sk_buff *s = skb;
	__u64 now, deq_len, left, base;
	__u32 id, backlog;

	if (!skb)
		return 0;
	st = event(q, dev, &cfg, &id, &now, &backlog);
	if (!st)
		return 0;
	deq_len = skb->len; /* bytes of this dequeue (all of a bulk's skbs) */
	/* the gap check: only between two dequeues with data left in between (the port stayed busy) */
	if (st->last_deq_ns && st->last_backlog > 0 && cfg->ns_per_byte_q16) {
		__u64 gap = now - st->last_deq_ns;
		__u64 ideal = (st->last_deq_len * cfg->ns_per_byte_q16) >> 16;
		__u64 dev = gap > ideal ? gap - ideal : ideal - gap;
		__u32 b = log2_bucket(dev / 1000, GAP_BUCKETS / 2);
		__u32 i = gap > ideal ? GAP_BUCKETS / 2 + b : b;

		if (i < GAP_BUCKETS)
			st->gap[i]++;
		if (cfg->late_ns && gap >= ideal + cfg->late_ns) {
			st->gap_late++;
			st->cur.late++;
		}
		st->gap_n++;
		st->gap_sum_abs_ns += dev;
	}
	left = q->q.qlen + (packets > 0 ? packets : 1); /* skbs queued before this dequeue */
	base = st->fifo_enq > left ? st->fifo_enq - left : 0;
	for (int i = 0; i < BULK_MAX && i < packets && s; i++) {
		dequeued(st, id, s, dev, now, base + i);
		if (i > 0)
			deq_len += s->len;
		s = s->next;
	}
	st->last_deq_ns = now;
	st->last_deq_len = deq_len;
	st->last_backlog = backlog;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
