-- The sweep's rules, each written once as a SQL expression over the names it is
-- given. Queries in this package splice them in as {{rule(arg, ...)}}; the loader
-- (adapters/_sql.py) expands them once, at load time. An argument is a column
-- reference (alias.column) or a $n parameter, never user input.
-- The Python core (stall_core._decide) is the reference; the contract suite and the
-- differential tests hold these to it.

-- rule: passes_gate(todo)
-- The sender gate (SPEC-0011): no delivery (an operator's todo), or a verified one.
-- It fails closed: a todo whose delivery row is missing does not pass.
({todo}.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = {todo}.delivery_id AND gate_d.verified))

-- rule: is_work(todo, quarantine)
-- Pending work a nudge may name: pending, outside the quarantine queue, past the gate.
({todo}.state = 'pending' AND {todo}.queue <> {quarantine} AND {{passes_gate({todo})}})

-- rule: endpoint_active(endpoint_id)
-- Only an active endpoint's queues are nudged (a paused or disabled one keeps its row).
EXISTS (SELECT 1 FROM endpoints active_e
         WHERE active_e.id = {endpoint_id} AND active_e.state = 'active')

-- rule: covers(hook, endpoint_id, queue)
-- An enabled notify hook of the endpoint whose queue filter covers the queue (NULL: all).
({hook}.endpoint_id = {endpoint_id} AND {hook}.enabled
 AND ({hook}.queues IS NULL OR {queue} = ANY ({hook}.queues)))

-- rule: has_receiver(endpoint_id, queue)
-- Some enabled notify hook covers the pair: without one a pair is never charged.
EXISTS (SELECT 1 FROM notify_hooks receiver_h
         WHERE {{covers(receiver_h, {endpoint_id}, {queue})}})

-- rule: stalled(created_at, now, threshold_us)
-- Older than the stall threshold, strictly (a todo exactly that old is still fresh).
({created_at} < {now}::timestamptz - {threshold_us}::bigint * interval '1 microsecond')

-- rule: unabsorbed_claim_at(endpoint_id, queue)
-- The latest claim in the pair that no charge has absorbed yet (the claim log), or NULL.
(SELECT max(claim_c.claimed_at) FROM stall_nudge_claims claim_c
  WHERE claim_c.endpoint_id = {endpoint_id} AND claim_c.queue = {queue})

-- rule: starts_over(row)
-- The next nudge is nudge 1, due at once: no ledger row, or progress (an unabsorbed claim).
({row}.endpoint_id IS NULL
 OR EXISTS (SELECT 1 FROM stall_nudge_claims progress_c
             WHERE progress_c.endpoint_id = {row}.endpoint_id
               AND progress_c.queue = {row}.queue))

-- rule: backoff_over(nudges, last_nudged_at, now, backoff_us, cap)
-- Without progress, nudge nudges + 1 may fire: below the cap, and the step after the
-- last attempt is over (a refunded first nudge, 0, waits the first step; past the end
-- of the schedule its last step repeats).
({nudges} < {cap}
 AND {now}::timestamptz >= {last_nudged_at}
     + ({backoff_us}::bigint[])[LEAST(GREATEST({nudges}, 1), cardinality({backoff_us}::bigint[]))]
       * interval '1 microsecond')

-- rule: charge_order(spent, created_at, endpoint_id, queue)
-- Which due pairs a tick charges first: least nudged, then oldest work, then endpoint
-- and queue by code point (the order of the core's plan_tick).
{spent}, {created_at}, {endpoint_id} COLLATE "C", {queue} COLLATE "C"
