// SPDX-License-Identifier: GPL-2.0
/* Flowlet switching and adaptive routing at one ECMP router (sched_cls, direct action); one instance per node,
 * its maps shared by its programs.
 *
 * ``flowlet`` runs at the clsact ingress of the node's ports that are no ECMP next hop (the ports traffic may
 * arrive on to go up). Each IPv4 packet gets skb->mark = its flowlet's way, 1..ways, and policy routing sends way
 * k through a table holding each ECMP route's k-th next hop (testbed/fabric/routing.py). A flow (5-tuple) keeps
 * its way while its packets arrive no more than gap_ns apart; a packet after a longer idle spell starts a new
 * flowlet on the next way in turn, on a random way, or (adaptive) on the way whose uplink queue holds the fewest
 * bytes now. The mark is scrubbed when the packet leaves the namespace.
 *
 * ``uplink`` runs at the clsact egress of the node's uplinks, before any ECN marker there (it returns
 * TC_ACT_UNSPEC, so the next filter runs): a packet carrying way k tells the node which root qdisc way k
 * leaves through, and the adaptive pick reads that qdisc's byte backlog (bpf_probe_read_kernel through a
 * pointer kept in a map; a way not seen yet counts as empty). Reading the backlog needs bpf_cast_to_kern_ctx
 * (Linux 6.2+), as the ECN marker does.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define TC_ACT_UNSPEC -1
#define TC_ACT_OK 0
#define MAX_WAYS 16
#define PICK_TURN 0
#define PICK_RANDOM 1
#define PICK_LEAST_QUEUED 2
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define PROTO_TCP 6
#define PROTO_UDP 17

struct flowlet_cfg {
	__u64 gap_ns;   /* idle spell that ends a flowlet */
	__u32 ways;     /* 0: do nothing; at most MAX_WAYS */
	__u32 pick;     /* PICK_TURN, PICK_RANDOM or PICK_LEAST_QUEUED */
};

struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 proto;
};

struct flow_state {
	__u64 last_ns;
	__u32 way;
	__u32 pad;
};

struct flowlet_stats {
	__u64 packets;       /* IPv4 packets given a way */
	__u64 flowlets;      /* flowlets started: a flow's first packet, or one after an idle spell above gap_ns */
	__u64 switches;      /* flowlets that started on another way than the flow's previous one */
	__u64 min_gap_new;   /* shortest idle spell (ns) that started a flowlet; 0 while none has */
	__u64 max_gap_kept;  /* longest idle spell (ns) over which a flow kept its way */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flowlet_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} turn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flowlet_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_WAYS + 1);
	__type(key, __u32);
	__type(value, __u64);  /* the kernel address of the root qdisc way k leaves through; 0: not seen yet */
} qdiscs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} flows SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

static __always_inline __u32 backlog_of(__u32 way)
{
	__u64 *ptr = bpf_map_lookup_elem(&qdiscs, &way);
	__u32 backlog = 0;

	if (!ptr || !*ptr)
		return 0;
	if (bpf_probe_read_kernel(&backlog, sizeof(backlog), &((struct Qdisc *)*ptr)->qstats.backlog))
		return 0;
	return backlog;
}

static __always_inline __u32 next_way(const struct flowlet_cfg *c)
{
	__u32 zero = 0, best = 0, best_backlog = 0xffffffff;
	__u32 *t, n, i;

	if (c->pick == PICK_RANDOM)
		return bpf_get_prandom_u32() % c->ways + 1;
	t = bpf_map_lookup_elem(&turn, &zero);
	if (!t)
		return 1;
	/* not atomic: clang's default BPF CPU (v1) cannot use an atomic add's result, and two CPUs starting flowlets
	 * at the same instant may then share a turn, which round-robin tolerates */
	n = *t;
	*t = n + 1;
	if (c->pick != PICK_LEAST_QUEUED)
		return n % c->ways + 1;
	for (i = 0; i < MAX_WAYS; i++) {  /* from this turn's way on, so that ties rotate */
		__u32 way, b;

		if (i >= c->ways)
			break;
		way = (n + i) % c->ways + 1;
		b = backlog_of(way);
		if (b < best_backlog) {
			best_backlog = b;
			best = way;
		}
	}
	return best ? best : 1;
}

SEC("tc")
int flowlet(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct flowlet_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	struct flowlet_stats *st = bpf_map_lookup_elem(&stats, &zero);
	struct flow_key k = {};
	struct flow_state *f;
	struct iphdr ip;
	__u16 ports[2] = {};
	__u64 now, idle;
	__u32 way;

	if (!c || !st || !c->ways || skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return TC_ACT_OK;
	k.saddr = ip.saddr;
	k.daddr = ip.daddr;
	k.proto = ip.protocol;
	if (ip.protocol == PROTO_TCP || ip.protocol == PROTO_UDP) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + ip.ihl * 4, ports, sizeof(ports)))
			return TC_ACT_OK;
		k.sport = ports[0];
		k.dport = ports[1];
	}
	now = bpf_ktime_get_ns();
	f = bpf_map_lookup_elem(&flows, &k);
	if (!f) {
		struct flow_state fresh = {.last_ns = now, .way = next_way(c)};

		way = fresh.way;
		bpf_map_update_elem(&flows, &k, &fresh, BPF_ANY);
		st->flowlets++;
	} else {
		idle = now > f->last_ns ? now - f->last_ns : 0;
		if (idle > c->gap_ns) {
			way = next_way(c);
			if (way != f->way)
				st->switches++;
			if (!st->min_gap_new || idle < st->min_gap_new)
				st->min_gap_new = idle;
			st->flowlets++;
			f->way = way;
		} else {
			way = f->way;
			if (idle > st->max_gap_kept)
				st->max_gap_kept = idle;
		}
		f->last_ns = now;
	}
	skb->mark = way;
	st->packets++;
	return TC_ACT_OK;
}

SEC("tc")
int uplink(struct __sk_buff *ctx)
{
	struct sk_buff *skb;
	__u32 way = ctx->mark;
	__u64 q, *known;

	if (way < 1 || way > MAX_WAYS)
		return TC_ACT_UNSPEC;
	skb = bpf_cast_to_kern_ctx(ctx);
	q = (__u64)BPF_CORE_READ(skb, dev, qdisc);
	known = bpf_map_lookup_elem(&qdiscs, &way);
	if (known && *known != q)
		*known = q;
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
