--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    seq bigint NOT NULL,
    object text NOT NULL,
    epoch bigint NOT NULL,
    writer text NOT NULL,
    writer_incarnation bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    type text NOT NULL,
    from_state text,
    to_state text,
    output text,
    command_id text,
    definition text,
    hard boolean,
    attempt integer,
    attempts_needed integer,
    flapping boolean
);


--
-- Name: jaque_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.jaque_schema (
    version integer NOT NULL
);


--
-- Name: objects; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.objects (
    object text NOT NULL,
    state text,
    definition text,
    paused boolean,
    acknowledged boolean,
    deleted boolean,
    last_seq bigint NOT NULL,
    labels text,
    soft_state text,
    soft_attempt integer,
    soft_attempts_needed integer,
    flapping boolean
);


--
-- Name: sink_progress; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sink_progress (
    sink text NOT NULL,
    "position" bigint NOT NULL,
    updated_at timestamp with time zone
);


--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.events (seq, object, epoch, writer, writer_incarnation, at, type, from_state, to_state, output, command_id, definition, hard, attempt, attempts_needed, flapping) FROM stdin;
2	web	1	fixture	1796695729499	2026-12-08 02:08:49.547+00	put	\N	\N	\N	put-web	{"probe":{"type":"http","url":"http://127.0.0.1:45995/"},"interval_ms":1000,"timeout_ms":500}	\N	\N	\N	\N
3	db	1	fixture	1796695729499	2026-12-08 02:08:49.548+00	put	\N	\N	\N	put-db	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":1000,"timeout_ms":1000}	\N	\N	\N	\N
4	quiet	1	fixture	1796695729499	2026-12-08 02:08:49.548+00	put	\N	\N	\N	put-quiet	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	\N	\N	\N	\N
5	gone	1	fixture	1796695729499	2026-12-08 02:08:49.549+00	put	\N	\N	\N	put-gone	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	\N	\N	\N	\N
6	child	1	fixture	1796695729499	2026-12-08 02:08:49.549+00	put	\N	\N	\N	put-child	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000,"parents":["db"]}	\N	\N	\N	\N
7	jaque/policy	1	fixture	1796695729499	2026-12-08 02:08:49.55+00	policy	\N	\N	\N	policy-receiver	{"op":"put_receiver","receiver":{"name":"db-team","kind":"webhook","url":"https://hooks.example.com/db","secret":{"env":"DB_HOOK_SECRET"}}}	\N	\N	\N	\N
8	jaque/policy	1	fixture	1796695729499	2026-12-08 02:08:49.55+00	policy	\N	\N	\N	policy-routes	{"op":"set_routes","routes":[{"selector":"team=db","receivers":["db-team"],"repeat_interval_ms":3600000}]}	\N	\N	\N	\N
9	jaque/policy	1	fixture	1796695729499	2026-12-08 02:08:49.551+00	policy	\N	\N	\N	policy-window	{"op":"put_window","window":{"name":"tuesday","selector":"env=prod","schedule":{"days":["tue"],"start":"02:00","duration_ms":7200000,"time_zone":"Europe/Berlin"},"comment":"patch night"}}	\N	\N	\N	\N
10	jaque/policy	1	fixture	1796695729499	2026-12-08 02:08:49.552+00	policy	\N	\N	\N	policy-silence	{"op":"put_silence","silence":{"name":"db-upgrade","selector":"team=db","starts_at":1767225600000,"ends_at":4102444800000,"author":"ana","comment":"upgrade"}}	\N	\N	\N	\N
11	quiet	1	fixture	1796695729499	2026-12-08 02:08:50.168+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
12	db	1	fixture	1796695729499	2026-12-08 02:08:50.206+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
13	web	1	fixture	1796695729499	2026-12-08 02:08:50.302+00	transition	pending	ok	HTTP 200	\N	\N	t	1	\N	\N
14	child	1	fixture	1796695729499	2026-12-08 02:08:54.048+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
15	gone	1	fixture	1796695729499	2026-12-08 02:08:54.534+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
16	web	1	fixture	1796695729499	2026-12-08 02:08:54.566+00	pause	\N	\N	\N	pause-web	\N	\N	\N	\N	\N
17	db	1	fixture	1796695729499	2026-12-08 02:08:54.567+00	ack	\N	\N	\N	ack-db	\N	\N	\N	\N	\N
18	quiet	1	fixture	1796695729499	2026-12-08 02:08:54.568+00	check_requested	\N	\N	\N	check-quiet	\N	\N	\N	\N	\N
19	quiet	1	fixture	1796695729499	2026-12-08 02:08:54.569+00	pause	\N	\N	\N	pause-quiet	\N	\N	\N	\N	\N
20	quiet	1	fixture	1796695729499	2026-12-08 02:08:54.57+00	resume	\N	\N	\N	resume-quiet	\N	\N	\N	\N	\N
21	gone	1	fixture	1796695729499	2026-12-08 02:08:54.571+00	delete	\N	\N	\N	delete-gone	\N	\N	\N	\N	\N
\.


--
-- Data for Name: jaque_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.jaque_schema (version) FROM stdin;
2
\.


--
-- Data for Name: objects; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.objects (object, state, definition, paused, acknowledged, deleted, last_seq, labels, soft_state, soft_attempt, soft_attempts_needed, flapping) FROM stdin;
child	critical	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000,"parents":["db"]}	f	f	f	14	{}	\N	\N	\N	f
db	critical	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":1000,"timeout_ms":1000}	f	t	f	17	{}	\N	\N	\N	f
gone	\N	\N	f	f	t	21	\N	\N	\N	\N	f
jaque/policy	\N	\N	f	f	t	10	\N	\N	\N	\N	f
quiet	critical	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	f	f	f	20	{}	\N	\N	\N	f
web	ok	{"probe":{"type":"http","url":"http://127.0.0.1:45995/"},"interval_ms":1000,"timeout_ms":500}	t	f	f	16	{}	\N	\N	\N	f
\.


--
-- Data for Name: sink_progress; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.sink_progress (sink, "position", updated_at) FROM stdin;
fixture	22	2026-12-08 02:08:55.309974+00
\.


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (seq);


--
-- Name: objects objects_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.objects
    ADD CONSTRAINT objects_pkey PRIMARY KEY (object);


--
-- Name: sink_progress sink_progress_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sink_progress
    ADD CONSTRAINT sink_progress_pkey PRIMARY KEY (sink);


--
-- Name: events_object_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX events_object_seq ON public.events USING btree (object, seq);


--
-- PostgreSQL database dump complete
--


