// SPDX-License-Identifier: GPL-2.0
/* DCTCP (RFC 8257) as a BPF struct_ops tcp_congestion_ops, for kernels built without tcp_dctcp.
 *
 * Written for this project after the algorithm of RFC 8257 and the interface the kernel's own tcp_dctcp and
 * its BPF selftest use. Sender: alpha = (1 - g) alpha + g F once per window of data, F = fraction of the
 * window's delivered packets that were CE-marked (tp->delivered_ce / tp->delivered), g = 1/16; on ECE the
 * window shrinks to cwnd (1 - alpha / 2); a loss halves it. Receiver: the CE state machine that echoes ECE
 * exactly on the packets that carried CE (ACK at once when the CE state flips).
 * Growth is Reno's (the kernel's tcp_reno_cong_avoid kfunc). Not done (the kernel module does it): falling back
 * to Reno when the peer did not negotiate ECN.
 *
 * The name below is a placeholder: the loader rewrites it in a copy of the object to a per-run name.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_DEMAND_CWR 4
#define ALPHA_ONE 1024U   /* alpha is kept in units of 1/1024 */
#define G_SHIFT 4         /* g = 1/16 */
#define STATE_MAGIC 0x7bdc7c01U /* set by init: a socket whose state lacks it was never initialized by us */

struct dctcp_state {
	__u32 window_end;       /* snd_nxt when the current observation window began */
	__u32 delivered_start;  /* tp->delivered at the window start */
	__u32 ce_start;         /* tp->delivered_ce at the window start */
	__u32 alpha;
	__u32 loss_cwnd;
	__u32 rcv_nxt_prev;     /* receiver: rcv_nxt before the last CE state change */
	__u32 ce_now;           /* receiver: 1 if the last data packet carried CE */
	__u32 ca_state;         /* last congestion state we were told about */
	__u32 magic;            /* STATE_MAGIC once init ran */
	__u32 max_cwnd;         /* the largest cwnd seen that passed the sanity check */
};

/* Read from the object's .bss by the tests. On Linux 6.18 a sender sometimes sits in CWR with an ssthresh no
 * program of ours set (infinite, or a word like 0x81104110), and PRR then grows cwnd without bound. Our programs
 * do run meanwhile (no recursion misses; re-applying ssthresh()'s value on entering CWR never found it changed),
 * so the cause is in the kernel. uninit_state counts sockets whose state was found uninitialized (before any
 * repair); repaired counts garbage cwnd/ssthresh values put right per ACK. The repair narrows the bug, it does not
 * remove it: some runs still drop. The counts seen in runs: docs/bench.md ("The BPF DCTCP's repair"). */
__u64 uninit_state = 0;
__u64 repaired = 0;

#define TCP_INFINITE_SSTHRESH 0x7fffffffU

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

static __always_inline struct tcp_sock *as_tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct dctcp_state *state_of(struct sock *sk)
{
	return (struct dctcp_state *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline void new_window(struct tcp_sock *tp, struct dctcp_state *s)
{
	s->window_end = tp->snd_nxt;
	s->delivered_start = tp->delivered;
	s->ce_start = tp->delivered_ce;
}

static __always_inline void on_loss(struct tcp_sock *tp, struct dctcp_state *s)
{
	s->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd / 2 > 2 ? tp->snd_cwnd / 2 : 2;
}

static __always_inline void set_demand_cwr(struct tcp_sock *tp, __u32 on)
{
	if (on)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

static __always_inline void init_state(struct tcp_sock *tp, struct dctcp_state *s)
{
	s->alpha = ALPHA_ONE;
	s->loss_cwnd = 0;
	s->ce_now = 0;
	s->ca_state = 0;
	s->rcv_nxt_prev = tp->rcv_nxt;
	new_window(tp, s);
	s->max_cwnd = tp->snd_cwnd;
	s->magic = STATE_MAGIC;
}

/* Per ACK: put right a cwnd or ssthresh no legitimate step could have produced. cwnd grows at most by the segments
 * an ACK covers (< 2x), undo restores at most a cwnd we saw, and every ssthresh we or the kernel set is at most a cwnd
 * seen (or infinite), so anything above twice the largest cwnd seen (+64) is garbage. */
static __always_inline void repair(struct tcp_sock *tp, struct dctcp_state *s)
{
	__u32 bound = 2 * s->max_cwnd + 64;

	if (tp->snd_cwnd > bound) {
		/* what undo would have returned: the cwnd before the last reduction */
		tp->snd_cwnd = s->loss_cwnd && s->loss_cwnd <= s->max_cwnd ? s->loss_cwnd : s->max_cwnd;
		__sync_fetch_and_add(&repaired, 1);
	}
	/* In CWR or Recovery an infinite ssthresh is garbage too: PRR would grow cwnd by ssthresh / prior_cwnd per
	 * ACK (docs/bench.md, "The BPF DCTCP's repair"). */
	if ((tp->snd_ssthresh != TCP_INFINITE_SSTHRESH || s->ca_state == TCP_CA_CWR || s->ca_state == TCP_CA_Recovery) &&
	    tp->snd_ssthresh > bound) {
		tp->snd_ssthresh = tp->snd_cwnd / 2 > 2 ? tp->snd_cwnd / 2 : 2;
		__sync_fetch_and_add(&repaired, 1);
	}
	if (tp->snd_cwnd > s->max_cwnd)
		s->max_cwnd = tp->snd_cwnd;
}

/* The socket's state, initialized now if init never ran for it (its bytes would be whatever was there). */
static __always_inline struct dctcp_state *ready(struct sock *sk)
{
	struct dctcp_state *s = state_of(sk);

	if (s->magic != STATE_MAGIC) {
		__sync_fetch_and_add(&uninit_state, 1);
		init_state(as_tcp(sk), s);
	}
	return s;
}

SEC("struct_ops/tbd_dctcp_init")
void BPF_PROG(tbd_dctcp_init, struct sock *sk)
{
	init_state(as_tcp(sk), state_of(sk));
}

SEC("struct_ops/tbd_dctcp_ssthresh")
__u32 BPF_PROG(tbd_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = as_tcp(sk);
	struct dctcp_state *s = ready(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 cut = (__u32)(((__u64)cwnd * s->alpha) >> 11); /* cwnd * alpha / 2, alpha <= 1 */

	s->loss_cwnd = cwnd;
	return cwnd > cut + 2 ? cwnd - cut : 2;
}

SEC("struct_ops/tbd_dctcp_in_ack")
void BPF_PROG(tbd_dctcp_in_ack, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = as_tcp(sk);
	struct dctcp_state *s = ready(sk);
	__u32 delivered, ce, alpha;

	repair(tp, s);
	if ((__s32)(tp->snd_una - s->window_end) < 0)
		return; /* the window of observation has not ended yet */
	delivered = tp->delivered - s->delivered_start;
	ce = tp->delivered_ce - s->ce_start;
	alpha = s->alpha - (s->alpha >> G_SHIFT);
	if (alpha == s->alpha && alpha)
		alpha--; /* let alpha decay to 0 when nothing is marked */
	if (ce) {
		if (!delivered)
			delivered = 1;
		alpha += (ce << (10 - G_SHIFT)) / delivered;
		if (alpha > ALPHA_ONE)
			alpha = ALPHA_ONE;
	}
	s->alpha = alpha;
	new_window(tp, s);
}

SEC("struct_ops/tbd_dctcp_set_state")
void BPF_PROG(tbd_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct dctcp_state *s = state_of(sk); /* also called before init (openreq child) */

	/* RTO is handled in cwnd_event (CA_EVENT_LOSS), so that one loss reacts once. */
	if (new_state == TCP_CA_Recovery && s->ca_state != TCP_CA_Recovery)
		on_loss(as_tcp(sk), s);
	s->ca_state = new_state;
}

SEC("struct_ops/tbd_dctcp_cwnd_event")
void BPF_PROG(tbd_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = as_tcp(sk);
	struct dctcp_state *s = ready(sk);
	__u32 ce;

	if (ev == CA_EVENT_LOSS) {
		on_loss(tp, s);
		return;
	}
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	ce = ev == CA_EVENT_ECN_IS_CE;
	if (s->ce_now != ce) {
		/* The CE state flipped: a delayed ACK still owed must carry the old state, then ACK at once. */
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			set_demand_cwr(tp, s->ce_now);
			bpf_tcp_send_ack(tp, s->rcv_nxt_prev);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	s->rcv_nxt_prev = tp->rcv_nxt;
	s->ce_now = ce;
	set_demand_cwr(tp, ce);
}

SEC("struct_ops/tbd_dctcp_undo")
__u32 BPF_PROG(tbd_dctcp_undo, struct sock *sk)
{
	struct tcp_sock *tp = as_tcp(sk);
	struct dctcp_state *s = ready(sk);

	return tp->snd_cwnd > s->loss_cwnd ? tp->snd_cwnd : s->loss_cwnd; /* loss_cwnd: a cwnd we saw, or 0 */
}

SEC("struct_ops/tbd_dctcp_cong_avoid")
void BPF_PROG(tbd_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct dctcp_state *s = ready(sk);

	repair(as_tcp(sk), s);
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC(".struct_ops")
struct tcp_congestion_ops tbd_dctcp = {
	.init = (void *)tbd_dctcp_init,
	.ssthresh = (void *)tbd_dctcp_ssthresh,
	.in_ack_event = (void *)tbd_dctcp_in_ack,
	.set_state = (void *)tbd_dctcp_set_state,
	.cwnd_event = (void *)tbd_dctcp_cwnd_event,
	.undo_cwnd = (void *)tbd_dctcp_undo,
	.cong_avoid = (void *)tbd_dctcp_cong_avoid,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "dctcp_XXXXXXXXX",
};

char LICENSE[] SEC("license") = "GPL";
