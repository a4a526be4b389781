/* SPDX-License-Identifier: GPL-2.0 */
/* A traffic class's own queue: the leaf qdisc of HTB class 1:minor, found in HTB's class hash under the port's
 * root. The eBPF marker (marker.bpf.c) marks a class on it, and the PFC watch (pfc.bpf.c) judges XOFF/XON on it.
 * Include after vmlinux.h, bpf_helpers.h and bpf_core_read.h. */
#ifndef TESTBED_HTB_LEAF_H
#define TESTBED_HTB_LEAF_H

#define CHAIN_MAX 8 /* classes walked in one HTB hash bucket */

/* The byte backlog of HTB class 1:minor's leaf qdisc under root `q` (qdisc_class_find); -1 when it is not there. */
static __always_inline __s64 leaf_backlog(struct Qdisc *q, __u32 minor)
{
	struct htb_sched *hs = (void *)q->privdata;
	struct Qdisc_class_hash clhash;
	struct hlist_head head;
	struct hlist_node *node;
	__u32 id = (1 << 16) | minor, h = id;

	if (bpf_probe_read_kernel(&clhash, sizeof(clhash), &hs->clhash))
		return -1;
	h ^= h >> 8;
	h ^= h >> 4;
	h &= clhash.hashmask;
	if (bpf_probe_read_kernel(&head, sizeof(head), clhash.hash + h))
		return -1;
	node = head.first;
	for (int i = 0; i < CHAIN_MAX && node; i++) {
		struct Qdisc_class_common *c = container_of(node, struct Qdisc_class_common, hnode);

		if (BPF_CORE_READ(c, classid) == id) {
			struct htb_class *cl = (void *)c;

			return BPF_CORE_READ(cl, leaf.q, qstats.backlog);
		}
		node = BPF_CORE_READ(node, next);
	}
	return -1;
}

#endif
