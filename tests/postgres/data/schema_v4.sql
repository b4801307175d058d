-- A database an earlier build (schema version 4, the incremental footprint: triggers on the
-- host's tables, a claim log) migrated with --host-schema: pg_dump of its schema and of our
-- records, made with that build (git 72e1988). tests/postgres/test_migrate.py upgrades it.


-- Name: stall_nudge; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA stall_nudge;

-- Name: log_change(); Type: FUNCTION; Schema: stall_nudge; Owner: -

CREATE FUNCTION stall_nudge.log_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF to_regclass('stall_nudge.changes') IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.state = 'pending' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (OLD.endpoint_id::text, OLD.queue, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'pending' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (NEW.endpoint_id::text, NEW.queue, NEW.created_at);
    END IF;
    RETURN NULL;
END
$$;

-- Name: log_claim(); Type: FUNCTION; Schema: stall_nudge; Owner: -

CREATE FUNCTION stall_nudge.log_claim() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF to_regclass('stall_nudge.claims') IS NOT NULL THEN
        INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)
        VALUES (NEW.endpoint_id::text, NEW.queue, NEW.claimed_at);
    END IF;
    RETURN NULL;
END
$$;

-- Name: log_endpoint_change(); Type: FUNCTION; Schema: stall_nudge; Owner: -

CREATE FUNCTION stall_nudge.log_endpoint_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF to_regclass('stall_nudge.changes') IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(OLD) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(NEW) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    RETURN NULL;
END
$$;

-- Name: log_ledger_delete(); Type: FUNCTION; Schema: stall_nudge; Owner: -

CREATE FUNCTION stall_nudge.log_ledger_delete() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF coalesce(current_setting('stall_nudge.sweeping', true), '') <> 'on'
       AND to_regclass('stall_nudge.changes') IS NOT NULL THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        SELECT gone.endpoint_id, gone.queue, o.look_after
          FROM gone
         CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', gone.endpoint_id::text))).id AS key) k
         CROSS JOIN LATERAL (
                SELECT LEAST((SELECT pending_s.created_at FROM todos pending_s
        WHERE pending_s.endpoint_id = k.key AND pending_s.queue = gone.queue
          AND pending_s.state = 'pending' AND (octet_length(pending_s.endpoint_id::text) + octet_length(pending_s.queue) <= 2000)
          AND (pending_s.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = pending_s.delivery_id AND gate_d.verified))
        ORDER BY pending_s.created_at
        LIMIT 1),
      (SELECT pending_l.created_at FROM todos pending_l
        WHERE (md5(pending_l.endpoint_id::text) = md5(gone.endpoint_id::text) AND md5(pending_l.queue) = md5(gone.queue::text)
 AND pending_l.endpoint_id::text = gone.endpoint_id AND pending_l.queue = gone.queue)
          AND pending_l.state = 'pending' AND (octet_length(pending_l.endpoint_id::text) + octet_length(pending_l.queue) > 2000)
          AND (pending_l.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = pending_l.delivery_id AND gate_d.verified))
        ORDER BY pending_l.created_at
        LIMIT 1)) AS look_after) o
         WHERE o.look_after IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;

-- Name: log_truncate(); Type: FUNCTION; Schema: stall_nudge; Owner: -

CREATE FUNCTION stall_nudge.log_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF to_regclass('stall_nudge.sweeps') IS NOT NULL THEN
        UPDATE stall_nudge.sweeps SET full_pass_at = NULL;
    END IF;
    RETURN NULL;
END
$$;

-- Name: deliveries; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.deliveries (
    id text NOT NULL,
    endpoint_id text NOT NULL,
    verified boolean NOT NULL,
    received_at timestamp with time zone NOT NULL
);

-- Name: endpoints; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.endpoints (
    id text NOT NULL,
    state text NOT NULL,
    CONSTRAINT endpoints_state_check CHECK ((state = ANY (ARRAY['active'::text, 'paused'::text, 'disabled'::text])))
);

-- Name: notify_hooks; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.notify_hooks (
    id text NOT NULL,
    endpoint_id text NOT NULL,
    url text NOT NULL,
    secret text NOT NULL,
    queues text[],
    enabled boolean NOT NULL,
    consecutive_failures integer DEFAULT 0 NOT NULL,
    disabled_at timestamp with time zone,
    disabled_reason text
);

-- Name: queue_stall_nudges; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.queue_stall_nudges (
    endpoint_id text NOT NULL,
    queue text NOT NULL,
    nudges integer NOT NULL,
    last_nudged_at timestamp with time zone NOT NULL,
    CONSTRAINT stall_nudge_nudges_not_negative CHECK ((nudges >= 0))
);

-- Name: todos; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.todos (
    id text NOT NULL,
    endpoint_id text NOT NULL,
    queue text NOT NULL,
    delivery_id text,
    state text NOT NULL,
    title text,
    created_at timestamp with time zone NOT NULL,
    claimed_at timestamp with time zone,
    claim_owner text,
    lease_expires_at timestamp with time zone,
    attempt integer DEFAULT 0 NOT NULL,
    ring_attempts integer DEFAULT 0 NOT NULL,
    last_ringed_at timestamp with time zone,
    CONSTRAINT todos_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'claimed'::text, 'done'::text, 'failed'::text])))
);

-- Name: changes; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.changes (
    endpoint_id text NOT NULL,
    queue text,
    look_after timestamp with time zone NOT NULL
);

-- Name: claims; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.claims (
    endpoint_id text NOT NULL,
    queue text NOT NULL,
    claimed_at timestamp with time zone NOT NULL
);

-- Name: held; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.held (
    endpoint_id text NOT NULL,
    queue text NOT NULL,
    todo_id text NOT NULL,
    created_at timestamp with time zone NOT NULL
);

-- Name: migrations; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL
);

-- Name: objects; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.objects (
    kind text NOT NULL,
    name text NOT NULL,
    on_table text DEFAULT ''::text NOT NULL,
    ours boolean NOT NULL,
    definition text NOT NULL
);

-- Name: settings; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.settings (
    singleton boolean DEFAULT true NOT NULL,
    footprint text NOT NULL,
    changed_at timestamp with time zone NOT NULL,
    CONSTRAINT settings_footprint_check CHECK ((footprint = ANY (ARRAY['lean'::text, 'incremental'::text]))),
    CONSTRAINT settings_singleton_check CHECK (singleton)
);

-- Name: sweeps; Type: TABLE; Schema: stall_nudge; Owner: -

CREATE TABLE stall_nudge.sweeps (
    singleton boolean DEFAULT true NOT NULL,
    swept_at timestamp with time zone NOT NULL,
    interval_ms bigint,
    full_pass_at timestamp with time zone,
    full_pass_ms double precision,
    CONSTRAINT sweeps_singleton_check CHECK (singleton)
);

-- Name: deliveries deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (id);

-- Name: endpoints endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.endpoints
    ADD CONSTRAINT endpoints_pkey PRIMARY KEY (id);

-- Name: notify_hooks notify_hooks_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.notify_hooks
    ADD CONSTRAINT notify_hooks_pkey PRIMARY KEY (id);

-- Name: todos todos_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.todos
    ADD CONSTRAINT todos_pkey PRIMARY KEY (id);

-- Name: migrations migrations_pkey; Type: CONSTRAINT; Schema: stall_nudge; Owner: -

ALTER TABLE ONLY stall_nudge.migrations
    ADD CONSTRAINT migrations_pkey PRIMARY KEY (version);

-- Name: objects objects_pkey; Type: CONSTRAINT; Schema: stall_nudge; Owner: -

ALTER TABLE ONLY stall_nudge.objects
    ADD CONSTRAINT objects_pkey PRIMARY KEY (kind, name, on_table);

-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: stall_nudge; Owner: -

ALTER TABLE ONLY stall_nudge.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (singleton);

-- Name: sweeps sweeps_pkey; Type: CONSTRAINT; Schema: stall_nudge; Owner: -

ALTER TABLE ONLY stall_nudge.sweeps
    ADD CONSTRAINT sweeps_pkey PRIMARY KEY (singleton);

-- Name: stall_nudge_claimed; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_claimed ON public.todos USING btree (endpoint_id, queue, claimed_at) WHERE ((claimed_at IS NOT NULL) AND ((octet_length(endpoint_id) + octet_length(queue)) <= 2000));

-- Name: stall_nudge_claimed_long; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_claimed_long ON public.todos USING btree (md5(endpoint_id), md5(queue), claimed_at) WHERE ((claimed_at IS NOT NULL) AND ((octet_length(endpoint_id) + octet_length(queue)) > 2000));

-- Name: stall_nudge_hooks; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_hooks ON public.notify_hooks USING btree (endpoint_id) WHERE enabled;

-- Name: stall_nudge_ledger_due; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_ledger_due ON public.queue_stall_nudges USING btree (nudges, last_nudged_at);

-- Name: stall_nudge_ledger_pair; Type: INDEX; Schema: public; Owner: -

CREATE UNIQUE INDEX stall_nudge_ledger_pair ON public.queue_stall_nudges USING btree (md5(endpoint_id), md5(queue));

-- Name: stall_nudge_pending; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_pending ON public.todos USING btree (endpoint_id, queue, created_at) WHERE ((state = 'pending'::text) AND ((octet_length(endpoint_id) + octet_length(queue)) <= 2000));

-- Name: stall_nudge_pending_long; Type: INDEX; Schema: public; Owner: -

CREATE INDEX stall_nudge_pending_long ON public.todos USING btree (md5(endpoint_id), md5(queue), created_at) WHERE ((state = 'pending'::text) AND ((octet_length(endpoint_id) + octet_length(queue)) > 2000));

-- Name: changes_due; Type: INDEX; Schema: stall_nudge; Owner: -

CREATE INDEX changes_due ON stall_nudge.changes USING btree (look_after);

-- Name: claims_pair; Type: INDEX; Schema: stall_nudge; Owner: -

CREATE INDEX claims_pair ON stall_nudge.claims USING btree (md5(endpoint_id), md5(queue), claimed_at);

-- Name: held_due; Type: INDEX; Schema: stall_nudge; Owner: -

CREATE INDEX held_due ON stall_nudge.held USING btree (created_at);

-- Name: held_pair; Type: INDEX; Schema: stall_nudge; Owner: -

CREATE UNIQUE INDEX held_pair ON stall_nudge.held USING btree (md5(endpoint_id), md5(queue));

-- Name: todos stall_nudge_claim; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_claim AFTER UPDATE ON public.todos FOR EACH ROW WHEN (((new.claimed_at IS NOT NULL) AND (new.claimed_at IS DISTINCT FROM old.claimed_at))) EXECUTE FUNCTION stall_nudge.log_claim();

-- Name: todos stall_nudge_claimed_insert; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_claimed_insert AFTER INSERT ON public.todos FOR EACH ROW WHEN ((new.claimed_at IS NOT NULL)) EXECUTE FUNCTION stall_nudge.log_claim();

-- Name: todos stall_nudge_created; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_created AFTER INSERT ON public.todos FOR EACH ROW WHEN ((new.state = 'pending'::text)) EXECUTE FUNCTION stall_nudge.log_change();

-- Name: todos stall_nudge_deleted; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_deleted AFTER DELETE ON public.todos FOR EACH ROW WHEN ((old.state = 'pending'::text)) EXECUTE FUNCTION stall_nudge.log_change();

-- Name: endpoints stall_nudge_endpoint_state; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_endpoint_state AFTER UPDATE OF state ON public.endpoints FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION stall_nudge.log_endpoint_change('id');

-- Name: notify_hooks stall_nudge_hook; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_hook AFTER INSERT OR DELETE OR UPDATE OF enabled, queues, endpoint_id ON public.notify_hooks FOR EACH ROW EXECUTE FUNCTION stall_nudge.log_endpoint_change('endpoint_id');

-- Name: queue_stall_nudges stall_nudge_ledger_delete; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_ledger_delete AFTER DELETE ON public.queue_stall_nudges REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_ledger_delete();

-- Name: todos stall_nudge_moved; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_moved AFTER UPDATE OF endpoint_id, queue, created_at, delivery_id ON public.todos FOR EACH ROW WHEN (((old.state = 'pending'::text) OR (new.state = 'pending'::text))) EXECUTE FUNCTION stall_nudge.log_change();

-- Name: todos stall_nudge_state; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_state AFTER UPDATE ON public.todos FOR EACH ROW WHEN ((((old.state = 'pending'::text) <> (new.state = 'pending'::text)) AND (NOT (new.claimed_at IS DISTINCT FROM old.claimed_at)))) EXECUTE FUNCTION stall_nudge.log_change();

-- Name: deliveries stall_nudge_truncated; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_truncated AFTER TRUNCATE ON public.deliveries FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_truncate();

-- Name: endpoints stall_nudge_truncated; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_truncated AFTER TRUNCATE ON public.endpoints FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_truncate();

-- Name: notify_hooks stall_nudge_truncated; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_truncated AFTER TRUNCATE ON public.notify_hooks FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_truncate();

-- Name: queue_stall_nudges stall_nudge_truncated; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_truncated AFTER TRUNCATE ON public.queue_stall_nudges FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_truncate();

-- Name: todos stall_nudge_truncated; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_truncated AFTER TRUNCATE ON public.todos FOR EACH STATEMENT EXECUTE FUNCTION stall_nudge.log_truncate();

-- Name: deliveries stall_nudge_verified; Type: TRIGGER; Schema: public; Owner: -

CREATE TRIGGER stall_nudge_verified AFTER UPDATE OF verified ON public.deliveries FOR EACH ROW WHEN ((old.verified IS DISTINCT FROM new.verified)) EXECUTE FUNCTION stall_nudge.log_endpoint_change('endpoint_id');

-- Name: deliveries deliveries_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.endpoints(id);

-- Name: notify_hooks notify_hooks_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.notify_hooks
    ADD CONSTRAINT notify_hooks_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.endpoints(id);

-- Name: todos todos_delivery_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.todos
    ADD CONSTRAINT todos_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES public.deliveries(id);

-- Name: todos todos_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.todos
    ADD CONSTRAINT todos_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.endpoints(id);



-- Data for Name: migrations; Type: TABLE DATA; Schema: stall_nudge; Owner: -

INSERT INTO stall_nudge.migrations VALUES (4, 'baseline', '2026-12-04 21:55:21.424039+00');

-- Data for Name: settings; Type: TABLE DATA; Schema: stall_nudge; Owner: -

INSERT INTO stall_nudge.settings VALUES (true, 'incremental', '2026-12-04 21:55:21.424039+00');


