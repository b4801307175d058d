-- The sweep's rules, each written once as a SQL expression over the names it is
-- given. Queries in this package splice them in as {{rule(arg, ...)}}; the loader
-- (adapters/_sql.py) expands them once, at load time. An argument is a column
-- reference (alias.column) or a $n parameter, never user input.
-- The Python core (stall_core._decide) is the reference; the contract suite and the
-- differential tests hold these to it.
--
-- Host ids may be text, uuid or bigint: the sweep handles every id as its text form
-- (column::text, the column itself on a text host), and our own tables store that form.
-- Our tables key pairs by md5 of each name, so a name of any length fits their indexes.

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
         WHERE active_e.id::text = {endpoint_id} AND active_e.state = 'active')

-- rule: covers(hook, endpoint_id, queue)
-- An enabled notify hook of the endpoint whose queue filter covers the queue (NULL: all).
({hook}.endpoint_id::text = {endpoint_id} AND {hook}.enabled
 AND ({hook}.queues IS NULL OR {queue} = ANY ({hook}.queues)))

-- rule: has_receiver(endpoint_id, queue)
-- Some enabled notify hook covers the pair: without one a pair is never charged.
EXISTS (SELECT 1 FROM notify_hooks receiver_h
         WHERE {{covers(receiver_h, {endpoint_id}, {queue})}})

-- rule: stalled(created_at, now, threshold_us)
-- Older than the stall threshold, strictly (a todo exactly that old is still fresh).
({created_at} < {now}::timestamptz - {threshold_us}::bigint * interval '1 microsecond')

-- rule: pair_is(row, endpoint_id, queue)
-- A row of our tables is the pair's: one descent of the table's (md5(endpoint_id),
-- md5(queue)) index, the names themselves compared too.
(md5({row}.endpoint_id) = md5({endpoint_id}::text) AND md5({row}.queue) = md5({queue}::text)
 AND {row}.endpoint_id = {endpoint_id} AND {row}.queue = {queue})

-- rule: unabsorbed_claim_at(endpoint_id, queue)
-- The latest claim in the pair that no charge has absorbed yet (the claim log), or NULL.
(SELECT max(claim_c.claimed_at) FROM stall_nudge_claims claim_c
  WHERE {{pair_is(claim_c, {endpoint_id}, {queue})}})

-- rule: claim_rank(claim)
-- A claim's place among its pair's unabsorbed claims, latest first (1: the latest).
row_number() OVER (PARTITION BY {claim}.endpoint_id, {claim}.queue
                   ORDER BY {claim}.claimed_at DESC, {claim}.ctid DESC)

-- rule: claim_superseded(rank, claim)
-- A claim no tick will read, ranked {rank} by claim_rank: only whether a pair has a
-- claim, and its latest, are ever read, and a pair with no ledger row starts over
-- anyway (its next nudge is a first one).
({rank} > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE {{pair_is(superseded_n, {claim}.endpoint_id, {claim}.queue)}}))

-- rule: starts_over(pair)
-- The next nudge is nudge 1, due at once: no ledger row, or progress (an unabsorbed claim).
({pair}.row_nudges IS NULL
 OR EXISTS (SELECT 1 FROM stall_nudge_claims progress_c
             WHERE {{pair_is(progress_c, {pair}.endpoint_id, {pair}.queue)}}))

-- rule: backoff_step(nudges, backoff_us)
-- The wait after nudge number nudges (a refunded first nudge, 0, waits the first step;
-- past the end of the schedule its last step repeats).
(({backoff_us}::bigint[])[LEAST(GREATEST({nudges}, 1), cardinality({backoff_us}::bigint[]))]
 * interval '1 microsecond')

-- rule: backoff_ended(nudges, last_nudged_at, now, backoff_us)
-- The step after the last attempt is over. Written as a bound on last_nudged_at so a
-- probe per count is a range scan of stall_nudge_ledger_due.
({last_nudged_at} <= {now}::timestamptz - {{backoff_step({nudges}, {backoff_us})}})

-- rule: backoff_over(nudges, last_nudged_at, now, backoff_us, cap)
-- Without progress, nudge nudges + 1 may fire: below the cap, and its backoff ended.
({nudges} < {cap} AND {{backoff_ended({nudges}, {last_nudged_at}, {now}, {backoff_us})}})

-- rule: short_names(todo)
-- A todo whose names fit an entry of stall_nudge_todos_pending_short (a btree entry
-- stops near 2.7 kB): the pending index splits on this, so no host write can fail.
(octet_length({todo}.endpoint_id::text) + octet_length({todo}.queue)
 + octet_length({todo}.id::text) + coalesce(octet_length({todo}.delivery_id::text), 0) <= 2000)

-- rule: long_names(todo)
-- The other todos, in stall_nudge_todos_pending_long, keyed by md5 of the pair's names.
(octet_length({todo}.endpoint_id::text) + octet_length({todo}.queue)
 + octet_length({todo}.id::text) + coalesce(octet_length({todo}.delivery_id::text), 0) > 2000)

-- rule: long_pair(todo, endpoint_id, queue)
-- The todo's pair is (endpoint_id, queue): a descent of stall_nudge_todos_pending_long.
(md5({todo}.endpoint_id::text) = md5({endpoint_id}::text) AND md5({todo}.queue) = md5({queue}::text)
 AND {todo}.endpoint_id::text = {endpoint_id} AND {todo}.queue = {queue})

-- rule: oldest_work(endpoint_id, queue, quarantine)
-- The pair's oldest pending todo that is work (ties by id in "C" order, as the core
-- breaks them): one descent of each side of the pending index.
SELECT oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id::text = {endpoint_id} AND work_t.queue = {queue}
            AND {{short_names(work_t)}} AND {{is_work(work_t, {quarantine})}}
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE {{long_pair(long_t, {endpoint_id}, {queue})}}
            AND {{long_names(long_t)}} AND {{is_work(long_t, {quarantine})}}
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1

-- rule: oldest_gated_at(endpoint_id, queue)
-- When the pair's oldest pending todo past the gate was created (NULL: none): at or
-- before its oldest work. A todo the gate holds back becomes work when its delivery's
-- verification changes, which logs its endpoint, or (on a host without the foreign
-- key) when its delivery row arrives, which the full pass catches.
LEAST((SELECT pending_s.created_at FROM todos pending_s
        WHERE pending_s.endpoint_id::text = {endpoint_id} AND pending_s.queue = {queue}
          AND pending_s.state = 'pending' AND {{short_names(pending_s)}}
          AND {{passes_gate(pending_s)}}
        ORDER BY pending_s.created_at
        LIMIT 1),
      (SELECT pending_l.created_at FROM todos pending_l
        WHERE {{long_pair(pending_l, {endpoint_id}, {queue})}}
          AND pending_l.state = 'pending' AND {{long_names(pending_l)}}
          AND {{passes_gate(pending_l)}}
        ORDER BY pending_l.created_at
        LIMIT 1))

-- rule: host_id(table, id)
-- The host's id (text, uuid or bigint: the type of table.id) of its text form, so a
-- lookup descends the host's primary key whatever the id type.
(json_populate_record(NULL::{table}, json_build_object('id', {id}::text))).id

-- rule: charge_order(spent, created_at, endpoint_id, queue)
-- Which due pairs a tick charges first: least nudged, then oldest work, then endpoint
-- and queue by code point (the order of the core's plan_tick).
{spent}, {created_at}, {endpoint_id} COLLATE "C", {queue} COLLATE "C"

-- rule: changes_after(look_after, now, threshold_us)
-- The next instant after look_after with a pair change past the threshold (NULL: none).
SELECT min(after_x.look_after) AS look_after FROM stall_nudge_changes after_x
 WHERE after_x.queue IS NOT NULL AND {{stalled(after_x.look_after, {now}, {threshold_us})}}
   AND after_x.look_after > {look_after}

-- rule: first_nudges_at(look_after, now, threshold_us, quarantine)
-- The pairs changed at look_after that are due a first nudge (no ledger row, and a
-- candidate as charge_judged says), as md5 keys, with the age of their oldest work.
SELECT coalesce(array_agg(md5(first_x.endpoint_id) || md5(first_x.queue)), '{}') AS pairs,
       coalesce(array_agg(first_w.created_at), '{}') AS ages
  FROM (SELECT DISTINCT first_c.endpoint_id, first_c.queue FROM stall_nudge_changes first_c
         WHERE first_c.look_after = {look_after} AND first_c.queue IS NOT NULL) first_x
 CROSS JOIN LATERAL ({{oldest_work(first_x.endpoint_id, first_x.queue, {quarantine})}}) first_w
 WHERE {{stalled(first_w.created_at, {now}, {threshold_us})}}
   AND NOT EXISTS (SELECT 1 FROM queue_stall_nudges first_r
                    WHERE {{pair_is(first_r, first_x.endpoint_id, first_x.queue)}})
   AND {{endpoint_active(first_x.endpoint_id)}}
   AND {{has_receiver(first_x.endpoint_id, first_x.queue)}}

-- rule: walk_filled(pairs, ages, next, tick_limit)
-- The walk has found tick_limit pairs due a first nudge, each with work older than
-- the next instant: no pair changed then or later can rank ahead of them.
((SELECT count(DISTINCT filled_u.pair) FROM unnest({pairs}, {ages}) AS filled_u (pair, age)
   WHERE filled_u.age < {next}) >= {tick_limit})

-- rule: walk_steps(tick_limit)
-- How many instants the walk judges at most before it gives up and every change is
-- judged (a log of changes that are mostly not due costs one pass, not two).
(64 + 4 * {tick_limit})

-- rule: within_cut(look_after)
-- A change the tick judges: at or before the CTE "cut" (no cut: every change).
({look_after} <= coalesce((SELECT within_c.look_after FROM cut within_c), 'infinity'))

-- rule: charge_judged()
-- How a tick acts on its judgement, the same for the full pass and the usual tick.
-- It follows the CTEs "work_rows" (each judged pair with work: its oldest, todo_id and
-- created_at, and its ledger row's row_ctid, row_nudges, last_nudged_at, NULL
-- without one), "to_drain" (judged ledger rows whose pair has no work: row_ctid,
-- endpoint_id, queue, nudges, last_nudged_at), "judged" (the pairs whose held-back
-- entry this tick decides) and "cut" (the last instant of pair changes judged; no
-- row: every change), and uses the charge's parameters $1..$6. Rows are written by
-- ctid (a TID scan), each compare-and-set on its columns as locked.
drained AS (
    -- Matching nudges and last_nudged_at re-checks the locked row: a row another
    -- sweeper charged since our snapshot is not deleted.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT s.row_ctid FROM to_drain s))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT s.endpoint_id, s.queue, s.nudges, s.last_nudged_at FROM to_drain s)
    RETURNING n.endpoint_id, n.queue
),
candidate AS MATERIALIZED (
    -- Stalled: past the threshold, endpoint active, an enabled hook covering the queue.
    -- Those cheap tests come first; the progress probe runs once, only for pairs with
    -- a ledger row. "fresh": nudge 1 is due at once (no row, or progress). Otherwise
    -- the row's count stands, 0 only for a refunded first nudge.
    SELECT w.endpoint_id, w.queue, w.todo_id, w.created_at, p.fresh,
           CASE WHEN p.fresh THEN 0 ELSE w.row_nudges END AS spent,
           w.row_ctid, w.row_nudges, w.last_nudged_at
      FROM work_rows w
     CROSS JOIN LATERAL (SELECT {{starts_over(w)}} AS fresh) p
     WHERE {{stalled(w.created_at, $1, $2)}}
       AND {{endpoint_active(w.endpoint_id)}}
       AND {{has_receiver(w.endpoint_id, w.queue)}}
),
ranked AS (
    -- Every due pair, ranked in charge order.
    SELECT c.*,
           row_number() OVER (ORDER BY {{charge_order(c.spent, c.created_at, c.endpoint_id, c.queue)}}) AS rank
      FROM candidate c
     WHERE c.fresh OR {{backoff_over(c.spent, c.last_nudged_at, $1, $3, $4)}}
),
due AS (
    -- The best tick_limit. The stamp is now, or the latest claim this charge absorbs
    -- if later, so every absorbed claim is at or before it.
    SELECT r.*, GREATEST($1::timestamptz, {{unabsorbed_claim_at(r.endpoint_id, r.queue)}}) AS stamp
      FROM ranked r
     WHERE r.rank <= $5
),
inserted AS (
    -- A pair with no row in this snapshot gets nudge 1. A row that appeared since (an
    -- older build sweeping without the tick lock, during a deploy) is a conflict:
    -- nothing is charged for the pair this tick.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    SELECT d.endpoint_id, d.queue, d.spent + 1, d.stamp
      FROM due d
     WHERE d.row_nudges IS NULL
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO NOTHING
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
advanced AS (
    -- Compare-and-set on the row as locked: it must still be the row this snapshot
    -- decided on (same count and stamp). Behind the tick lock (refunds take it too) it
    -- always is; a row an older build charged or deleted since is left alone.
    UPDATE queue_stall_nudges n
       SET nudges = d.spent + 1, last_nudged_at = d.stamp
      FROM due d
     WHERE n.ctid = ANY (ARRAY(SELECT k.row_ctid FROM due k WHERE k.row_ctid IS NOT NULL))
       AND d.endpoint_id = n.endpoint_id AND d.queue = n.queue
       AND d.row_nudges = n.nudges AND d.last_nudged_at = n.last_nudged_at
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
charged AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM advanced
),
absorbed AS (
    -- Claims are progress once: this tick absorbs every claim it sees of a pair it
    -- charged or drained, or of a pair with no ledger row (its next nudge is a first
    -- one anyway). A claim that commits after this snapshot stays for the next tick.
    -- Of a pair that keeps its claims, only the latest matters ("is there one", and
    -- the stamp a charge takes): the others go, so the log stays one row per pair.
    -- Which claim is the latest of its pair comes from one sort of the log (a plan
    -- that spills rather than degrades), not a probe per claim for a later one: a
    -- bitmap scan of the pair's later claims each, once the log is large, was 9 s of
    -- an 11 s tick after an outage (benchmarks/backlog.py).
    DELETE FROM stall_nudge_claims c
     USING (SELECT k.ctid AS at, {{claim_rank(k)}} AS newest FROM stall_nudge_claims k) k
     WHERE c.ctid = k.at
       AND ({{claim_superseded(k.newest, c)}}
            OR EXISTS (SELECT 1 FROM charged x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM drained x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue))
),
held_back AS (
    -- Due pairs with no ledger row that the tick limit held back: the next tick walks
    -- them in charge order. (A held-back pair with a row is judged again anyway: its
    -- claim or its ended backoff stays.) An entry that already says the same is kept as is.
    SELECT r.endpoint_id, r.queue, r.todo_id, r.created_at
      FROM ranked r
     WHERE r.rank > $5 AND r.row_nudges IS NULL
),
held AS (
    INSERT INTO stall_nudge_held AS h (endpoint_id, queue, todo_id, created_at)
    SELECT b.endpoint_id, b.queue, b.todo_id, b.created_at
      FROM held_back b
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET todo_id = EXCLUDED.todo_id, created_at = EXCLUDED.created_at
     WHERE (h.todo_id, h.created_at) IS DISTINCT FROM (EXCLUDED.todo_id, EXCLUDED.created_at)
),
released AS (
    -- Judged pairs that are no longer held back (charged, or not due) leave.
    DELETE FROM stall_nudge_held h
     WHERE h.ctid = ANY (ARRAY(
            SELECT k.ctid
              FROM judged j
             CROSS JOIN LATERAL (SELECT k.ctid FROM stall_nudge_held k
                                  WHERE {{pair_is(k, j.endpoint_id, j.queue)}}
                                  LIMIT 1) k
             WHERE (j.endpoint_id, j.queue) NOT IN (SELECT b.endpoint_id, b.queue
                                                      FROM held_back b)))
),
looked AS (
    -- Every change past the threshold up to the cut has had its pair judged (by
    -- "changed", or by the full pass): done with. Changes still within the threshold
    -- wait for their time, those past the cut for a later tick.
    DELETE FROM stall_nudge_changes x
     WHERE {{stalled(x.look_after, $1, $2)}}
       AND (x.queue IS NULL OR {{within_cut(x.look_after)}})
)
-- The title is read for the (at most tick_limit) charged todos only.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = {{host_id(todos, d.todo_id)}}
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 9
