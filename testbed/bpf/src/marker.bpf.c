// SPDX-License-Identifier: GPL-2.0
/* Switch-style ECN marker for one egress port (sched_cls, clsact egress, direct action).
 *
 * The filter runs before the packet is enqueued, so the root qdisc's byte backlog it reads is the queue the
 * packet arrives to. step: CE on every ECT packet when backlog >= low. ramp: probability 0 at low rising
 * linearly to pmax at high, 1 above high. Never drops: the leaf bfifo/pfifo drops above its limit.
 * Reading the backlog needs bpf_cast_to_kern_ctx (Linux 6.2+); the loader fails loudly without it.
 *
 * A port with traffic classes marks per class: `classes` holds, by DSCP, the class's thresholds and its HTB minor,
 * and the backlog read is that class's leaf queue (found in HTB's class hash under the root), not the port's.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "htb_leaf.h"

#define TC_ACT_OK 0
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define TCQ_F_CPUSTATS 0x20 /* per-cpu qstats: sch->qstats.backlog is not maintained */

/* skb->mark bit set on the packets this program turns CE, so the kernel queue telemetry (qtelem.bpf.c) counts
 * them at this port; the mark is scrubbed when the packet crosses into the next node's namespace (veth) */
#define QT_MARK_CE 0x80000000U

#define MODE_OFF 0
#define MODE_STEP 1
#define MODE_RAMP 2

struct marker_cfg {
	__u32 mode;
	__u32 low;      /* bytes: K (step) or Kmin (ramp) */
	__u32 high;     /* bytes: K (step) or Kmax (ramp) */
	__u32 pmax;     /* Pmax scaled to 0..0xffffffff */
};

struct class_cfg {
	struct marker_cfg m; /* mode OFF: the class does not mark (the port's cfg does not apply to a classed port) */
	__u32 minor;         /* the class's HTB minor: its leaf is 1:minor's qdisc */
	__u32 pad;
};

struct marker_stats {
	__u64 marks;        /* packets this program set to CE */
	__u64 ect_seen;     /* ECN-capable IP packets (ECT(0), ECT(1), or CE already) */
	__u64 not_ect;      /* IP packets that are not ECN-capable */
	__u64 max_backlog;  /* largest backlog (bytes) read on arrival */
	__u64 unreadable;   /* packets whose qdisc keeps per-cpu stats (backlog unreadable) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marker_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marker_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32); /* DSCP */
	__type(value, struct class_cfg);
} classes SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* The ECN field and the DSCP of an IP packet */
static __always_inline int ecn_field(struct __sk_buff *ctx, __u8 *ecn, __u32 *dscp)
{
	__u8 b[2];

	if (ctx->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(ctx, ETH_HLEN + 1, b, 1))
			return -1;
		*ecn = b[0] & 3;
		*dscp = b[0] >> 2;
		return 0;
	}
	if (ctx->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(ctx, ETH_HLEN, b, 2))
			return -1;
		*ecn = (b[1] >> 4) & 3;
		*dscp = ((b[0] & 0xf) << 2) | (b[1] >> 6);
		return 0;
	}
	return -1;
}

static __always_inline int decide(const struct marker_cfg *c, __u32 backlog)
{
	__u64 thr;

	if (backlog < c->low)
		return 0;
	if (c->mode == MODE_STEP || backlog > c->high)
		return 1;
	if (c->high == c->low)
		thr = c->pmax;
	else
		thr = (__u64)c->pmax * (backlog - c->low) / (c->high - c->low);
	return (__u64)bpf_get_prandom_u32() < thr;
}

SEC("tc")
int ecn_mark(struct __sk_buff *ctx)
{
	struct marker_stats *st;
	struct marker_cfg *c;
	struct class_cfg *cc;
	struct sk_buff *skb;
	struct net_device *dev;
	struct Qdisc *q;
	__u32 zero = 0, backlog, qflags, dscp = 0, minor = 0; /* minor: the class's, when it marks per class */
	__u64 segs;
	__u8 ecn;

	c = bpf_map_lookup_elem(&cfg, &zero);
	st = bpf_map_lookup_elem(&stats, &zero);
	if (!c || !st || ecn_field(ctx, &ecn, &dscp))
		return TC_ACT_OK;
	cc = bpf_map_lookup_elem(&classes, &dscp);
	if (cc && cc->m.mode != MODE_OFF) {
		c = &cc->m;
		minor = cc->minor;
	} else if (c->mode == MODE_OFF) {
		return TC_ACT_OK;
	}
	segs = ctx->gso_segs > 1 ? ctx->gso_segs : 1;
	if (ecn == 0) {
		st->not_ect += segs;
		return TC_ACT_OK;
	}
	st->ect_seen += segs;

	skb = bpf_cast_to_kern_ctx(ctx);
	dev = BPF_CORE_READ(skb, dev);
	q = BPF_CORE_READ(dev, qdisc);
	qflags = BPF_CORE_READ(q, flags);
	if (qflags & TCQ_F_CPUSTATS) {
		st->unreadable += segs;
		return TC_ACT_OK;
	}
	if (!minor) {
		backlog = BPF_CORE_READ(q, qstats.backlog);
	} else {
		__s64 b = leaf_backlog(q, minor);

		if (b < 0) {
			st->unreadable += segs;
			return TC_ACT_OK;
		}
		backlog = b;
	}
	if (backlog > st->max_backlog)
		st->max_backlog = backlog;

	if (ecn != 3 && decide(c, backlog) && bpf_skb_ecn_set_ce(ctx)) {
		st->marks += segs;
		ctx->mark |= QT_MARK_CE;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
