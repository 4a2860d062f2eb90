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
2	web	1	fixture	1796681418321	2026-12-07 22:10:18.368+00	put	\N	\N	\N	put-web	{"probe":{"type":"http","url":"http://127.0.0.1:43741/"},"interval_ms":1000,"timeout_ms":500}	\N	\N	\N	\N
3	db	1	fixture	1796681418321	2026-12-07 22:10:18.369+00	put	\N	\N	\N	put-db	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":1000,"timeout_ms":1000}	\N	\N	\N	\N
4	quiet	1	fixture	1796681418321	2026-12-07 22:10:18.369+00	put	\N	\N	\N	put-quiet	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	\N	\N	\N	\N
5	gone	1	fixture	1796681418321	2026-12-07 22:10:18.37+00	put	\N	\N	\N	put-gone	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	\N	\N	\N	\N
6	quiet	1	fixture	1796681418321	2026-12-07 22:10:18.989+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
7	db	1	fixture	1796681418321	2026-12-07 22:10:19.027+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
8	web	1	fixture	1796681418321	2026-12-07 22:10:19.125+00	transition	pending	ok	HTTP 200	\N	\N	t	1	\N	\N
9	gone	1	fixture	1796681418321	2026-12-07 22:10:23.356+00	transition	pending	critical	connect 127.0.0.1:9: Connection refused (os error 111)	\N	\N	t	1	\N	\N
10	web	1	fixture	1796681418321	2026-12-07 22:10:23.381+00	pause	\N	\N	\N	pause-web	\N	\N	\N	\N	\N
11	db	1	fixture	1796681418321	2026-12-07 22:10:23.382+00	ack	\N	\N	\N	ack-db	\N	\N	\N	\N	\N
12	quiet	1	fixture	1796681418321	2026-12-07 22:10:23.383+00	check_requested	\N	\N	\N	check-quiet	\N	\N	\N	\N	\N
13	quiet	1	fixture	1796681418321	2026-12-07 22:10:23.383+00	pause	\N	\N	\N	pause-quiet	\N	\N	\N	\N	\N
14	quiet	1	fixture	1796681418321	2026-12-07 22:10:23.384+00	resume	\N	\N	\N	resume-quiet	\N	\N	\N	\N	\N
15	gone	1	fixture	1796681418321	2026-12-07 22:10:23.385+00	delete	\N	\N	\N	delete-gone	\N	\N	\N	\N	\N
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
db	critical	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":1000,"timeout_ms":1000}	f	t	f	11	{}	\N	\N	\N	f
gone	\N	\N	f	f	t	15	\N	\N	\N	\N	f
quiet	critical	{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":3600000,"timeout_ms":5000}	f	f	f	14	{}	\N	\N	\N	f
web	ok	{"probe":{"type":"http","url":"http://127.0.0.1:43741/"},"interval_ms":1000,"timeout_ms":500}	t	f	f	10	{}	\N	\N	\N	f
\.


--
-- Data for Name: sink_progress; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.sink_progress (sink, "position", updated_at) FROM stdin;
fixture	16	2026-12-07 22:10:24.174055+00
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


