-- The rules more than one statement states, each written once as a SQL expression
-- over the arguments it is given. A statement (tick.sql, ledger.sql) uses one as
-- {{rule(arg, ...)}}; the loader (adapters/postgres/sql.py) expands it once, at load
-- time. An argument is a column reference (alias.column) or a $n parameter; a rule
-- reads the tables it names and its arguments, never a name its caller defines. A rule
-- that restates a rule of the core says so on a line "mirrors stall_core.<function>"
-- (a unit test checks each name exists); the contract suite and the differential tests
-- hold the two together.
--
-- Host tables are written @todos, @deliveries, @endpoints, @notify_hooks, and the
-- ledger @queue_stall_nudges: the loader qualifies them with the host's schema, and
-- every transaction of ours searches pg_catalog alone, so no object another role
-- creates in the host's schema is ever resolved (docs/host-schema.md).
--
-- Host ids may be text, varchar, uuid or bigint. Our tables store an id's text form; a
-- rule that looks up a host row takes the host's own value ("key", of the type of
-- endpoints.id), so it descends the host's index.

-- rule: endpoint_key(endpoint_id)
-- The host's endpoint id (the type of endpoints.id) of its text form.
(json_populate_record(NULL::@endpoints, json_build_object('id', {endpoint_id}::text))).id

-- rule: todo_key(todo_id)
-- The host's todo id (the type of todos.id) of its text form.
(json_populate_record(NULL::@todos, json_build_object('id', {todo_id}::text))).id

-- rule: hook_key(hook_id)
-- The host's hook id (the type of notify_hooks.id) of its text form.
(json_populate_record(NULL::@notify_hooks, json_build_object('id', {hook_id}::text))).id

-- rule: passes_gate(todo)
-- The sender gate (SPEC-0011): no delivery (an operator's todo), or a verified one.
-- It fails closed: a todo whose delivery row is missing does not pass. Written as "the
-- delivery is there, and not among the unverified" so both are index-only probes: of the
-- host's primary key, and of stall_nudge_unverified, which holds the unverified alone.
({todo}.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = {todo}.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = {todo}.delivery_id AND NOT gate_u.verified)))

-- rule: short_names(todo)
-- A todo whose pair's names fit an entry of a plain index (a btree entry stops near
-- 2.7 kB): our indexes keyed by the names hold only these, so no host write can fail
-- because of a name's length. The others are in the _long indexes, keyed by md5.
{{short_pair({todo}.endpoint_id, {todo}.queue)}}

-- rule: short_pair(endpoint_id, queue)
-- The pair's names fit a plain index entry, as short_names says of its todos.
(octet_length({endpoint_id}::text) + octet_length({queue}) <= 2000)

-- rule: long_pair(todo, endpoint_id, queue)
-- The todo is of a pair whose names are too long for a plain entry, (endpoint_id,
-- queue) by its text form: one descent of an md5-keyed _long index.
(md5({todo}.endpoint_id::text) = md5({endpoint_id}::text) AND md5({todo}.queue) = md5({queue})
 AND {todo}.endpoint_id::text = {endpoint_id}::text AND {todo}.queue = {queue}
 AND NOT {{short_names({todo})}})

-- rule: pair_is(row, endpoint_id, queue)
-- A row of our tables is the pair's: one descent of the table's (md5(endpoint_id),
-- md5(queue)) index, the names themselves compared too.
(md5({row}.endpoint_id) = md5({endpoint_id}::text) AND md5({row}.queue) = md5({queue})
 AND {row}.endpoint_id = {endpoint_id}::text AND {row}.queue = {queue})

-- rule: readable(at)
-- mirrors stall_core.readable
-- An instant every reader judges alike: strictly between the ends of a Python datetime's
-- range (years 1 to 9999, UTC), which asyncpg writes as -infinity and infinity. Not
-- -infinity, infinity, a year BC or past 9999; NULL for NULL, which a WHERE or a CASE
-- reads as not readable. A todo created at another instant is not work, a claim stamped
-- with one is not progress; status shows both (docs/host-schema.md).
({at} > '0001-01-01 00:00:00+00'::timestamptz
 AND {at} < '9999-12-31 23:59:59.999999+00'::timestamptz)

-- rule: oldest_work(key, endpoint_id, queue, quarantine)
-- mirrors stall_core.work_of
-- The pair's work: its oldest pending todo past the sender gate created at a readable
-- instant, ties broken by id in code point order, none in the quarantine queue: its id as
-- text, and created_at. One descent of the pending index, on the side its names' length
-- picks, from the first readable instant.
SELECT oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id::text AS id, work_t.created_at
           FROM @todos work_t
          WHERE {queue} <> {quarantine} AND {{short_pair({endpoint_id}, {queue})}}
            AND work_t.endpoint_id = {key} AND work_t.queue = {queue}
            AND work_t.state = 'pending' AND {{short_names(work_t)}}
            AND {{readable(work_t.created_at)}} AND {{passes_gate(work_t)}}
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id::text, long_t.created_at
           FROM @todos long_t
          WHERE {queue} <> {quarantine} AND NOT {{short_pair({endpoint_id}, {queue})}}
            AND {{long_pair(long_t, {endpoint_id}, {queue})}}
            AND long_t.state = 'pending' AND {{readable(long_t.created_at)}}
            AND {{passes_gate(long_t)}}
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w

-- rule: pair_work(head, head_at, key, endpoint_id, queue, quarantine)
-- mirrors stall_core.work_of
-- The pair's work as oldest_work says, taking the head the full pass's skip scan already
-- read (find_every_pair: head, head_at) where there is one, so no pair is looked up twice.
SELECT {head} AS id, {head_at} AS created_at
 WHERE {head} IS NOT NULL AND {queue} <> {quarantine}
UNION ALL
SELECT o.id, o.created_at
  FROM ({{oldest_work({key}, {endpoint_id}, {queue}, {quarantine})}}) o
 WHERE {head} IS NULL

-- rule: latest_claim(key, endpoint_id, queue)
-- mirrors stall_core.latest_claim
-- The latest readable claimed_at of any todo of the pair, or NULL: one backward descent
-- of the claimed index, on the side its names' length picks, from the last readable instant.
coalesce((SELECT claimed_t.claimed_at FROM @todos claimed_t
           WHERE {{short_pair({endpoint_id}, {queue})}}
             AND claimed_t.endpoint_id = {key} AND claimed_t.queue = {queue}
             AND claimed_t.claimed_at IS NOT NULL AND {{short_names(claimed_t)}}
             AND {{readable(claimed_t.claimed_at)}}
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM @todos claimed_l
           WHERE NOT {{short_pair({endpoint_id}, {queue})}}
             AND {{long_pair(claimed_l, {endpoint_id}, {queue})}}
             AND claimed_l.claimed_at IS NOT NULL AND {{readable(claimed_l.claimed_at)}}
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))

-- rule: named_pending(todo_id, key, queue)
-- mirrors stall_core.has_departed (negated)
-- The todo a ledger row names is still pending in its pair: one probe of the host's
-- primary key.
EXISTS (SELECT 1 FROM @todos named_t
         WHERE named_t.id = {{todo_key({todo_id})}} AND named_t.state = 'pending'
           AND named_t.endpoint_id = {key} AND named_t.queue = {queue})

-- rule: stalled(created_at, now, threshold_us)
-- mirrors stall_core.is_candidate
-- Older than the stall threshold, strictly (a todo exactly that old is still fresh).
({created_at} < {now}::timestamptz - {threshold_us}::bigint * interval '1 microsecond')

-- rule: backoff_step(nudges, backoff_us)
-- mirrors stall_core.PacingPolicy.delay_before
-- The wait after nudge number nudges (a refunded first nudge, 0, waits the first step;
-- past the end of the schedule its last step repeats).
(({backoff_us}::bigint[])[LEAST(GREATEST({nudges}, 1), cardinality({backoff_us}::bigint[]))]
 * interval '1 microsecond')

-- rule: backoff_over(last_nudged_at, nudges, now, backoff_us)
-- mirrors stall_core.next_due_at
-- A row's backoff step after its nudge number nudges has ended at now.
({last_nudged_at} <= {now}::timestamptz - {{backoff_step({nudges}, {backoff_us})}})

-- rule: charge_order(pair)
-- mirrors stall_core.charge_order
-- Least nudged since progress (spent), oldest work, then names by code point.
{pair}.spent, {pair}.created_at, {pair}.endpoint_id COLLATE "C", {pair}.queue COLLATE "C"

-- rule: covers(hook, key, queue)
-- The hook is the endpoint's and its queue filter covers the queue (NULL: all), as
-- adapters.memory's MemoryHooks.covers reads a hook.
({hook}.endpoint_id = {key} AND ({hook}.queues IS NULL OR {queue} = ANY ({hook}.queues)))

-- rule: endpoint_active(key)
-- mirrors stall_core.is_candidate
-- Only an active endpoint's queues are nudged.
EXISTS (SELECT 1 FROM @endpoints active_e WHERE active_e.id = {key} AND active_e.state = 'active')

-- rule: has_receiver(key, queue)
-- mirrors stall_core.is_candidate
-- An enabled notify hook of the endpoint whose queue filter covers the queue (NULL: all):
-- without one a pair is never charged.
EXISTS (SELECT 1 FROM @notify_hooks receiver_h
         WHERE {{covers(receiver_h, {key}, {queue})}} AND receiver_h.enabled)
