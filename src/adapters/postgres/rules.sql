-- The sweep's rules, each written once as a SQL expression over the parameters it is
-- given. Statements and the parts they are built from (tick.sql) use one as
-- {{rule(arg, ...)}}; the loader (adapters/postgres/sql.py) expands it once, at load
-- time. An argument is a column reference (alias.column) or a $n parameter; a rule
-- reads the tables it names and its parameters, never a name its caller defines.
-- The Python core (stall_core._decide) is the reference; the contract suite and the
-- differential tests hold these to it.
--
-- Host ids may be text, uuid or bigint. Our tables store an id's text form; a rule
-- that looks up a host row takes the host's own value ("key", of the type of
-- endpoints.id), so it descends the host's index. endpoint_key converts.

-- rule: endpoint_key(endpoint_id)
-- The host's endpoint id (the type of endpoints.id) of its text form: every reference
-- to an endpoint has that type (docs/host-schema.md).
(json_populate_record(NULL::endpoints, json_build_object('id', {endpoint_id}::text))).id

-- rule: todo_key(todo_id)
-- The host's todo id (the type of todos.id) of its text form.
(json_populate_record(NULL::todos, json_build_object('id', {todo_id}::text))).id

-- rule: hook_key(hook_id)
-- The host's hook id (the type of notify_hooks.id) of its text form.
(json_populate_record(NULL::notify_hooks, json_build_object('id', {hook_id}::text))).id

-- rule: passes_gate(todo)
-- The sender gate (SPEC-0011): no delivery (an operator's todo), or a verified one.
-- It fails closed: a todo whose delivery row is missing does not pass.
({todo}.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = {todo}.delivery_id AND gate_d.verified))

-- rule: is_work(todo, quarantine)
-- Pending work a nudge may name: pending, outside the quarantine queue, past the gate.
({todo}.state = 'pending' AND {todo}.queue <> {quarantine} AND {{passes_gate({todo})}})

-- rule: endpoint_active(key)
-- Only an active endpoint's queues are nudged (a paused or disabled one keeps its row).
EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = {key} AND active_e.state = 'active')

-- rule: covers(hook, key, queue)
-- An enabled notify hook of the endpoint whose queue filter covers the queue (NULL: all).
({hook}.endpoint_id = {key} AND {hook}.enabled
 AND ({hook}.queues IS NULL OR {queue} = ANY ({hook}.queues)))

-- rule: has_receiver(key, queue)
-- Some enabled notify hook covers the pair: without one a pair is never charged.
EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE {{covers(receiver_h, {key}, {queue})}})

-- rule: stalled(created_at, now, threshold_us)
-- Older than the stall threshold, strictly (a todo exactly that old is still fresh).
({created_at} < {now}::timestamptz - {threshold_us}::bigint * interval '1 microsecond')

-- rule: pair_is(row, endpoint_id, queue)
-- A row of our tables is the pair's: one descent of the table's (md5(endpoint_id),
-- md5(queue)) index, the names themselves compared too.
(md5({row}.endpoint_id) = md5({endpoint_id}::text) AND md5({row}.queue) = md5({queue}::text)
 AND {row}.endpoint_id = {endpoint_id} AND {row}.queue = {queue})

-- rule: short_names(todo)
-- A todo whose pair's names fit an entry of a plain index (a btree entry stops near
-- 2.7 kB): our pending and claimed indexes hold only these, so no host write can fail
-- because of a name's length. The longer ones are in the _long indexes, keyed by md5.
(octet_length({todo}.endpoint_id::text) + octet_length({todo}.queue) <= 2000)

-- rule: long_names(todo)
-- The other todos: their pair's names are too long for a plain index entry.
(octet_length({todo}.endpoint_id::text) + octet_length({todo}.queue) > 2000)

-- rule: long_pair(todo, endpoint_id, queue)
-- The todo's pair is (endpoint_id, queue), by its text form: a descent of an md5-keyed
-- _long index.
(md5({todo}.endpoint_id::text) = md5({endpoint_id}::text) AND md5({todo}.queue) = md5({queue}::text)
 AND {todo}.endpoint_id::text = {endpoint_id} AND {todo}.queue = {queue})

-- rule: oldest_work(key, endpoint_id, queue, quarantine)
-- The pair's oldest work (ties by id in "C" order, as the core breaks them): its id in
-- the host's type (todo) and as text (id), and created_at. One descent of each side
-- of the pending index; a head that fails the gate is passed over.
SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = {key} AND work_t.queue = {queue}
            AND {{short_names(work_t)}} AND {{is_work(work_t, {quarantine})}}
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE {{long_pair(long_t, {endpoint_id}, {queue})}}
            AND {{long_names(long_t)}} AND {{is_work(long_t, {quarantine})}}
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1

-- rule: claimed_after(key, endpoint_id, queue, after)
-- Progress read from the host's rows (stall_core.progress_by_timestamps): the latest
-- claimed_at of the pair's todos later than after, or NULL. One descent of each side
-- of the claimed index.
GREATEST((SELECT claimed_t.claimed_at FROM todos claimed_t
           WHERE claimed_t.endpoint_id = {key} AND claimed_t.queue = {queue}
             AND claimed_t.claimed_at > {after} AND {{short_names(claimed_t)}}
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM todos claimed_l
           WHERE {{long_pair(claimed_l, {endpoint_id}, {queue})}}
             AND claimed_l.claimed_at > {after} AND {{long_names(claimed_l)}}
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))

-- rule: logged_claim_at(endpoint_id, queue)
-- Progress in commit order (the incremental footprint's claim log): the latest claim
-- of the pair that no charge has consumed yet, or NULL. The log is empty in the lean
-- footprint.
(SELECT max(logged_c.claimed_at) FROM stall_nudge.claims logged_c
  WHERE {{pair_is(logged_c, {endpoint_id}, {queue})}})

-- rule: claim_rank(claim)
-- A logged claim's place among its pair's, latest first (1: the latest).
row_number() OVER (PARTITION BY {claim}.endpoint_id, {claim}.queue
                   ORDER BY {claim}.claimed_at DESC, {claim}.ctid DESC)

-- rule: claim_superseded(rank, claim)
-- A logged claim no tick will read, ranked {rank} by claim_rank: only a pair's latest
-- claim is ever read, and a pair with no ledger row starts over anyway (its next
-- nudge is a first one).
({rank} > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE {{pair_is(superseded_n, {claim}.endpoint_id, {claim}.queue)}}))

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

-- rule: charge_order(spent, created_at, endpoint_id, queue)
-- Which due pairs a tick charges first: least nudged, then oldest work, then endpoint
-- and queue by code point (the order of the core's plan_tick).
{spent}, {created_at}, {endpoint_id} COLLATE "C", {queue} COLLATE "C"

-- rule: oldest_gated_at(key, endpoint_id, queue)
-- When the pair's oldest pending todo past the gate was created (NULL: none): at or
-- before its oldest work. A todo the gate holds back becomes work when its delivery's
-- verification changes, which logs its endpoint, or (on a host without the foreign
-- key) when its delivery row arrives, which the full pass catches.
LEAST((SELECT pending_s.created_at FROM todos pending_s
        WHERE pending_s.endpoint_id = {key} AND pending_s.queue = {queue}
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

-- rule: changes_after(look_after, now, threshold_us)
-- The next instant after look_after with a pair change past the threshold (NULL: none).
SELECT min(after_x.look_after) AS look_after FROM stall_nudge.changes after_x
 WHERE after_x.queue IS NOT NULL AND {{stalled(after_x.look_after, {now}, {threshold_us})}}
   AND after_x.look_after > {look_after}

-- rule: first_nudges_at(look_after, now, threshold_us, quarantine)
-- The pairs changed at look_after that are due a first nudge (no ledger row, and a
-- candidate as the judging part says), as md5 keys, with the age of their oldest work.
SELECT coalesce(array_agg(md5(first_x.endpoint_id) || md5(first_x.queue)), '{}') AS pairs,
       coalesce(array_agg(first_w.created_at), '{}') AS ages
  FROM (SELECT DISTINCT first_c.endpoint_id, first_c.queue FROM stall_nudge.changes first_c
         WHERE first_c.look_after = {look_after} AND first_c.queue IS NOT NULL) first_x
 CROSS JOIN LATERAL (SELECT {{endpoint_key(first_x.endpoint_id)}} AS key) first_k
 CROSS JOIN LATERAL ({{oldest_work(first_k.key, first_x.endpoint_id, first_x.queue, {quarantine})}}) first_w
 WHERE {{stalled(first_w.created_at, {now}, {threshold_us})}}
   AND NOT EXISTS (SELECT 1 FROM queue_stall_nudges first_r
                    WHERE {{pair_is(first_r, first_x.endpoint_id, first_x.queue)}})
   AND {{endpoint_active(first_k.key)}}
   AND {{has_receiver(first_k.key, first_x.queue)}}

-- rule: walk_filled(pairs, ages, next, tick_limit)
-- The walk has found tick_limit pairs due a first nudge, each with work older than
-- the next instant: no pair changed then or later can rank ahead of them.
((SELECT count(DISTINCT filled_u.pair) FROM unnest({pairs}, {ages}) AS filled_u (pair, age)
   WHERE filled_u.age < {next}) >= {tick_limit})

-- rule: walk_steps(tick_limit)
-- How many instants the walk judges at most before it gives up and every change is
-- judged (a log of changes that are mostly not due costs one pass, not two).
(64 + 4 * {tick_limit})
