// SPDX-License-Identifier: GPL-2.0
/* Flowlet switching at one router port (sched_cls, clsact ingress, direct action).
 *
 * Runs on the ports of an ECMP router that are no ECMP next hop (the ports traffic may arrive on to go up). Each
 * IPv4 packet gets skb->mark = its flowlet's way, 1..ways, and policy routing sends way k through a table holding
 * each ECMP route's k-th next hop (testbed/fabric/routing.py). A flow (5-tuple) keeps its way while its packets
 * arrive no more than gap_ns apart; a packet after a longer idle spell starts a new flowlet on the next way in
 * turn (one counter per port) or on a random way. The mark is scrubbed when the packet leaves the namespace.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define TC_ACT_OK 0
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define PROTO_TCP 6
#define PROTO_UDP 17

struct flowlet_cfg {
	__u64 gap_ns;   /* idle spell that ends a flowlet */
	__u32 ways;     /* 0: do nothing */
	__u32 random;   /* 1: a new flowlet's way is random; 0: the next in turn */
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
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} flows SEC(".maps");

static __always_inline __u32 next_way(const struct flowlet_cfg *c)
{
	__u32 zero = 0;
	__u32 *t, n;

	if (c->random)
		return bpf_get_prandom_u32() % c->ways + 1;
	t = bpf_map_lookup_elem(&turn, &zero);
	if (!t)
		return 1;
	/* not atomic: clang's default BPF CPU (v1) cannot use an atomic add's result, and two CPUs starting flowlets
	 * at the same instant may then share a turn, which round-robin tolerates */
	n = *t;
	*t = n + 1;
	return n % c->ways + 1;
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

char LICENSE[] SEC("license") = "GPL";
