//! The status page (`GET /`) in headless Chromium against real processes: it lists the objects, problems
//! first; a state change reaches it through `GET /api/stream` without a reload; an acknowledgement from the page
//! reaches the log; a soft state shows with its attempt, labels as chips, a label selector filters the lists and
//! the counts (an invalid one shows the server's reason) and the lists group by a label key; a wrong write token
//! shows as a 401; with `-read-token` the page shows nothing until it is
//! given the token, then sends it with every read and its stream; and on a `-target ui` of a NATS cluster it follows the log
//! the engines write. A screenshot of the main page is saved as `target/status-page.png` for a reviewer.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`scripts/install-chromium.sh`; scripts/test.sh runs it):
//! without them every test here fails saying so.

use jaque_tests::browser::Browser;
use jaque_tests::{poll, Jaque, Nats, Target};
use serde_json::{json, Value};
use std::path::PathBuf;

/// An object whose every change is hard at once (`max_attempts` 1), so a check after its target stopped is
/// critical without retries in between.
fn define(j: &Jaque, id: &str, addr: &str) {
    let def = json!({"probe": {"type": "tcp", "addr": addr}, "interval": "1h", "timeout": "2s", "max_attempts": 1});
    let r = j.put(&format!("/api/objects/{id}"), &def);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An address that refuses connections: a check of it is critical.
fn closed_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

fn summary_state(j: &Jaque, state: &str) -> u64 {
    j.get("/api/summary").json()["states"][state].as_u64().unwrap()
}

/// Where the reviewer's screenshot goes: the workspace's `target/`.
fn screenshot_path(name: &str) -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The state a row of `list` (`problems` or `rest`) shows for `id`, or null when it is not in that list.
fn row_state(list: &str, id: &str) -> String {
    format!("const r = document.querySelector('#list-{list} tr[data-id=\"{id}\"]'); return r ? r.dataset.state : null;")
}

/// Opens the page and waits until its first load is drawn and its stream is live.
async fn open(b: &Browser, j: &Jaque) {
    b.client.goto(&format!("http://{}/", j.addr)).await.expect("the page loads");
    b.until("the page's first load and its live stream", "return window.jaqueStats && jaqueStats.renders > 0 && jaqueStats.connected && document.querySelector('#conn').dataset.state === 'live';").await;
}

#[tokio::test]
async fn the_page_lists_problems_first_follows_changes_live_and_acknowledges_into_the_log() {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let mut target = Target::start();
    let up = target.addr.to_string();
    let down = closed_port();
    define(&j, "web-frontend", &up);
    define(&j, "db-primary", &down);
    for i in 0..6 {
        define(&j, &format!("api-{i}"), &up);
    }
    // A new object is checked at once.
    poll("every object checked", || (summary_state(&j, "ok") == 7 && summary_state(&j, "critical") == 1).then_some(()));

    let b = Browser::start().await;
    open(&b, &j).await;
    // Problems first; the counts in the header are the API's.
    assert_eq!(b.js(&row_state("problems", "db-primary"), vec![]).await, "critical");
    assert_eq!(b.js(&row_state("rest", "web-frontend"), vec![]).await, "ok");
    assert_eq!(b.text("#count-critical").await.as_deref(), Some("1"));
    assert_eq!(b.text("#count-ok").await.as_deref(), Some("7"));
    assert_eq!(b.text("#count-all").await.as_deref(), Some("8"));
    let output = b.text("#list-problems tr[data-id=\"db-primary\"] td.output").await.unwrap();
    assert!(output.contains("refused"), "the last check's output is on the row: {output:?}");

    // A state change arrives through the stream: no reload of the page, no new load of its data.
    b.js("window.stillTheSamePage = true;", vec![]).await;
    let loads = b.js("return jaqueStats.loads;", vec![]).await;
    target.stop();
    let r = j.request("POST", "/api/objects/web-frontend/actions/check", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    b.until("web-frontend to move to the problems as critical", &row_state("problems", "web-frontend")).await;
    assert_eq!(b.js(&row_state("problems", "web-frontend"), vec![]).await, "critical");
    assert_eq!(b.js(&row_state("rest", "web-frontend"), vec![]).await, Value::Null, "gone from the rest");
    assert_eq!(b.js("return window.stillTheSamePage === true;", vec![]).await, true, "the page was not reloaded");
    assert_eq!(b.js("return jaqueStats.loads;", vec![]).await, loads, "applied from the stream, not loaded again");
    assert_eq!(b.text("#count-critical").await.as_deref(), Some("2"), "the counts moved with the change");
    assert_eq!(b.text("#count-ok").await.as_deref(), Some("6"));

    // Acknowledging from the page reaches the log: the API says so, and the row shows the mark.
    b.click("#list-problems tr[data-id=\"web-frontend\"] button.ack").await;
    let notice = b.until("the outcome of the acknowledgement", "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.includes('acknowledged') ? n.textContent : null;").await;
    assert!(notice.as_str().unwrap().starts_with("web-frontend: acknowledged (log position"), "{notice}");
    let o = j.get("/api/objects/web-frontend").json();
    assert_eq!(o["acknowledged"], true, "{o}");
    b.until(
        "the acknowledged mark on the row",
        "return document.querySelector('#list-problems tr[data-id=\"web-frontend\"] .mark.ack') !== null;",
    )
    .await;
    assert_eq!(b.text("#count-acknowledged").await.as_deref(), Some("1"));

    // Deleting asks first, then the row goes (through the stream) and so does the object.
    b.click("#list-rest tr[data-id=\"api-5\"] button.delete").await;
    b.until("the confirmation", "return document.querySelector('#confirm-dialog').open;").await;
    b.click("#confirm-dialog button[value=yes]").await;
    b.until("api-5 gone from the page", "return document.querySelector('tr[data-id=\"api-5\"]') === null;").await;
    assert_eq!(j.get("/api/objects/api-5").status, 404);
    assert_eq!(b.text("#count-all").await.as_deref(), Some("7"));

    // The reviewer's picture: problems first, one acknowledged, the counts, live.
    b.screenshot(&screenshot_path("status-page.png")).await;

    // Search by id and filter by state.
    b.type_into("#q", "api-").await;
    b.until("only the api objects", "const ids = [...document.querySelectorAll('#view-objects tr[data-id]')].map(r => r.dataset.id); return ids.length === 5 && ids.every(i => i.startsWith('api-'));").await;
    b.click("#filters input[value=critical]").await;
    b.until("the filter: no critical api object", "return document.querySelectorAll('#view-objects tr[data-id]').length === 0 && document.querySelector('#list-rest .empty').textContent.includes('Filtered out');").await;

    // An object's page: its definition and the last transition it knows (this ui has no store).
    b.client.goto(&format!("http://{}/#/object/db-primary", j.addr)).await.unwrap();
    let facts = b
        .until(
            "the object's page",
            "const d = document.querySelector('#object-body dl'); return d ? d.textContent : null;",
        )
        .await;
    let facts = facts.as_str().unwrap();
    assert!(facts.contains(&format!("TCP connect {down}")) && facts.contains("critical"), "{facts}");
    let note = b.until("the history note", "const p = [...document.querySelectorAll('#object-body p')].map(p => p.textContent).find(t => t.includes('-sink-store')); return p || null;").await;
    assert!(note.as_str().unwrap().contains("Only the last transition"), "{note}");

    // The cluster: the one engine is the epoch's member and owns every object.
    b.client.goto(&format!("http://{}/#/cluster", j.addr)).await.unwrap();
    let owners = b
        .until("the objects per owner", "const t = document.querySelector('#owners'); return t ? t.textContent : null;")
        .await;
    assert!(owners.as_str().unwrap().contains('7'), "{owners}");

    // The process goes away: the page says it is disconnected.
    j.proc.signal("TERM");
    b.until(
        "the page to say it is disconnected",
        "return document.querySelector('#conn').dataset.state === 'disconnected';",
    )
    .await;
    b.close().await;
}

#[tokio::test]
async fn a_wrong_write_token_shows_as_401_and_the_right_one_is_asked_for_and_used() {
    // With a sink, so the object's page shows its history from the store.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let args =
        ["-target", "engine,worker,ui,sink", "-queue", "memory", "-write-token", "s3cret", "-sink-store", &store];
    let j = Jaque::start("jaque-token", &args);
    j.wait_ready();
    let r = j.request(
        "PUT",
        "/api/objects/db",
        &[("authorization", "Bearer s3cret")],
        Some(json!({"probe": {"type": "tcp", "addr": closed_port()}}).to_string().as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    poll("db checked", || (summary_state(&j, "critical") == 1).then_some(()));

    let b = Browser::start().await;
    open(&b, &j).await;
    // No token yet: the write answers 401 and the page asks for one.
    b.click("#list-problems tr[data-id=\"db\"] button.pause").await;
    b.until("the token dialog", "return document.querySelector('#token-dialog').open;").await;
    b.type_into("#token", "wrong").await;
    b.click("#token-dialog button[value=send]").await;
    let error = b.until("the 401 for the wrong token", "const e = document.querySelector('#token-error').textContent; return document.querySelector('#token-dialog').open && e.includes('401') ? e : null;").await;
    assert!(error.as_str().unwrap().contains("401 Unauthorized: the token sent is not the write token"), "{error}");
    assert_eq!(j.get("/api/objects/db").json()["paused"], false, "nothing was written");

    // Cancelled: the 401 stays on the page, not a silent failure.
    b.click("#token-dialog button[value=cancel]").await;
    let notice = b.until("the 401 notice", "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.includes('401') ? n.textContent : null;").await;
    assert!(notice.as_str().unwrap().contains("was not sent"), "{notice}");

    // The right token: the write goes through.
    b.click("#list-problems tr[data-id=\"db\"] button.pause").await;
    b.until("the token dialog again", "return document.querySelector('#token-dialog').open;").await;
    b.type_into("#token", "s3cret").await;
    b.click("#token-dialog button[value=send]").await;
    b.until(
        "the pause applied",
        "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.startsWith('db: paused');",
    )
    .await;
    assert_eq!(j.get("/api/objects/db").json()["paused"], true);
    b.until(
        "the paused mark",
        "return document.querySelector('#list-problems tr[data-id=\"db\"] .mark.paused') !== null;",
    )
    .await;
    b.close().await;
}

/// A read with a bearer token.
fn get_with(j: &Jaque, path: &str, token: &str) -> jaque_tests::Response {
    j.request("GET", path, &[("authorization", &format!("Bearer {token}"))], None)
}

#[tokio::test]
async fn with_a_read_token_the_page_shows_nothing_until_it_is_given_then_reads_and_follows_with_it() {
    let args = ["-target", "engine,worker,ui", "-queue", "memory", "-read-token", "r3ad", "-write-token", "wr1te"];
    let j = Jaque::start("jaque-read-token", &args);
    j.wait_ready();
    // The page's own files are open (no data in them); every read of data is not.
    for open in ["/", "/assets/page.js", "/assets/page.css"] {
        assert_eq!(j.get(open).status, 200, "{open}");
    }
    for guarded in ["/api/summary", "/api/objects", "/api/stream", "/api/cluster", "/api/openapi.json"] {
        let r = j.get(guarded);
        assert_eq!(r.status, 401, "{guarded}: {}", r.text());
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{guarded}");
    }
    let put = |id: &str| {
        let def = json!({"probe": {"type": "tcp", "addr": closed_port()}, "interval": "1h", "timeout": "2s"});
        let r = j.request(
            "PUT",
            &format!("/api/objects/{id}"),
            &[("authorization", "Bearer wr1te")],
            Some(def.to_string().as_bytes()),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    };
    put("db");
    let critical = |n: u64| get_with(&j, "/api/summary", "r3ad").json()["states"]["critical"].as_u64() == Some(n);
    poll("db checked", || critical(1).then_some(()));

    let b = Browser::start().await;
    b.client.goto(&format!("http://{}/", j.addr)).await.expect("the page loads");
    b.until(
        "the read token's dialog",
        "return document.querySelector('#token-dialog').open && document.querySelector('#token-title').textContent === 'Read token';",
    )
    .await;
    assert_eq!(
        b.js("return document.querySelectorAll('tr[data-id]').length + (jaqueStats.renders > 0 ? 1000 : 0);", vec![])
            .await,
        0,
        "nothing of the ui's state is on the page without the token"
    );
    // Declined: the page says why it is empty, and stops asking until it is loaded again.
    b.click("#token-dialog button[value=cancel]").await;
    let notice = b.until("the 401 notice", "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.includes('401') ? n.textContent : null;").await;
    assert!(notice.as_str().unwrap().contains("only with its read token"), "{notice}");
    b.until("the stream given up", "return document.querySelector('#conn').dataset.state === 'disconnected';").await;
    b.client.refresh().await.unwrap();
    b.until("the read token's dialog again", "return document.querySelector('#token-dialog').open;").await;
    // A wrong token is refused, and said so; the right one opens the page, its stream included.
    b.type_into("#token", "wrong").await;
    b.click("#token-dialog button[value=send]").await;
    let error = b.until("the 401 for the wrong token", "const e = document.querySelector('#token-error').textContent; return document.querySelector('#token-dialog').open && e.includes('401') ? e : null;").await;
    assert!(error.as_str().unwrap().contains("401 Unauthorized: the token was refused"), "{error}");
    b.type_into("#token", "r3ad").await;
    b.click("#token-dialog button[value=send]").await;
    b.until("the page's first load and its live stream", "return jaqueStats.renders > 0 && jaqueStats.connected && document.querySelector('#conn').dataset.state === 'live';").await;
    assert_eq!(b.js(&row_state("problems", "db"), vec![]).await, "critical");

    // A change reaches the page through the stream it reads with the token, without a new load.
    let loads = b.js("return jaqueStats.loads;", vec![]).await;
    put("web");
    poll("web checked", || critical(2).then_some(()));
    b.until("web on the page as critical", &row_state("problems", "web")).await;
    assert_eq!(b.js("return jaqueStats.loads;", vec![]).await, loads, "applied from the stream, not loaded again");
    assert_eq!(b.text("#count-critical").await.as_deref(), Some("2"));

    // The read token does not write: the page asks for the write token, and the write goes through with it.
    b.click("#list-problems tr[data-id=\"db\"] button.pause").await;
    b.until(
        "the write token's dialog",
        "return document.querySelector('#token-dialog').open && document.querySelector('#token-title').textContent === 'Write token';",
    )
    .await;
    let error = b.text("#token-error").await.unwrap();
    assert!(error.contains("401 Unauthorized: the token sent is not the write token"), "{error}");
    assert_eq!(get_with(&j, "/api/objects/db", "r3ad").json()["paused"], false, "nothing was written");
    b.type_into("#token", "wr1te").await;
    b.click("#token-dialog button[value=send]").await;
    b.until(
        "the pause applied",
        "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.startsWith('db: paused');",
    )
    .await;
    assert_eq!(get_with(&j, "/api/objects/db", "r3ad").json()["paused"], true);

    // The token is kept for the tab's life: a reload reads with it (the write token grants reads) and asks nothing.
    b.client.refresh().await.unwrap();
    b.until(
        "the reloaded page's first load and its live stream",
        "return window.jaqueStats && jaqueStats.renders > 0 && jaqueStats.connected;",
    )
    .await;
    assert_eq!(b.js("return document.querySelector('#token-dialog').open;", vec![]).await, false);
    assert_eq!(b.js(&row_state("problems", "web"), vec![]).await, "critical");
    b.close().await;
}

#[tokio::test]
async fn on_a_ui_of_a_nats_cluster_the_page_follows_the_log_the_engines_write() {
    let nats = Nats::start();
    let engine = Jaque::start(
        "engine",
        // With its own API, to read the engine's view of the log.
        &[
            "-target",
            "engine,worker,ui",
            "-queue",
            &nats.url,
            "-coordination",
            &nats.url,
            "-id",
            "e1",
            "-heartbeat-ttl",
            "3s",
        ],
    );
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url, "-id", "ui1", "-heartbeat-ttl", "3s"]);
    engine.wait_ready();
    ui.wait_ready();
    let mut target = Target::start();
    define(&ui, "web", &target.addr.to_string());
    define(&ui, "db", &closed_port());
    poll("both checked, as the ui reads the log", || {
        (summary_state(&ui, "ok") == 1 && summary_state(&ui, "critical") == 1).then_some(())
    });

    let b = Browser::start().await;
    open(&b, &ui).await;
    assert_eq!(b.js(&row_state("problems", "db"), vec![]).await, "critical");
    assert_eq!(b.js(&row_state("rest", "web"), vec![]).await, "ok");
    assert_eq!(b.text("#list-rest tr[data-id=\"web\"] td.owner").await.as_deref(), Some("e1"));

    // The engine writes a transition; the ui's reader reads it and the page shows it without a reload.
    b.js("window.stillTheSamePage = true;", vec![]).await;
    target.stop();
    assert_eq!(ui.request("POST", "/api/objects/web/actions/check", &[], None).status, 200);
    b.until("web critical on the ui's page", &row_state("problems", "web")).await;
    assert_eq!(b.js("return window.stillTheSamePage === true;", vec![]).await, true);

    // An acknowledgement from the ui's page goes to the engine through NATS and into the log.
    b.click("#list-problems tr[data-id=\"web\"] button.ack").await;
    b.until("the acknowledgement applied", "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.startsWith('web: acknowledged');").await;
    poll("the engine's view of the log has the acknowledgement", || {
        (engine.get("/api/objects/web").json()["acknowledged"] == true).then_some(())
    });
    b.until(
        "the mark on the row",
        "return document.querySelector('#list-problems tr[data-id=\"web\"] .mark.ack') !== null;",
    )
    .await;

    // The cluster view: the engine is the epoch's member; the ui follows as no member of any bucket.
    b.client.goto(&format!("http://{}/#/cluster", ui.addr)).await.unwrap();
    let members = b
        .until(
            "the epoch's members",
            "const u = document.querySelector('#epoch-members'); return u && u.textContent ? u.textContent : null;",
        )
        .await;
    assert!(members.as_str().unwrap().contains("e1"), "{members}");
    b.close().await;
}

/// Sets a filter control's value as a person would change it (its `input` and `change` events).
async fn set_control(b: &Browser, css: &str, value: &str) {
    b.js(
        "const el = document.querySelector(arguments[0]); el.value = arguments[1]; \
         el.dispatchEvent(new Event('input', { bubbles: true })); el.dispatchEvent(new Event('change', { bubbles: true }));",
        vec![json!(css), json!(value)],
    )
    .await;
}

/// The ids of the rows on the objects view, sorted.
const ROW_IDS: &str =
    "[...document.querySelectorAll('#view-objects tr[data-id]')].map(r => r.dataset.id).sort().join(' ')";

#[tokio::test]
async fn the_page_shows_soft_states_and_labels_filters_by_a_selector_and_groups_by_a_label() {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let (mut db_target, up) = (Target::start(), Target::start());
    // (id, labels, target): db-1 retries only every 10 minutes, so its first soft attempt stays on the page.
    let objects = [
        ("web-1", json!({"env": "prod", "team": "web"}), up.addr.to_string()),
        ("db-1", json!({"env": "prod", "team": "db"}), db_target.addr.to_string()),
        ("api-1", json!({"env": "staging", "team": "api"}), up.addr.to_string()),
        ("batch", json!({}), up.addr.to_string()),
    ];
    for (id, labels, addr) in &objects {
        let def = json!({"probe": {"type": "tcp", "addr": addr}, "interval": "1h", "timeout": "2s", "labels": labels,
            "max_attempts": 3, "retry_interval": "10m"});
        let r = j.put(&format!("/api/objects/{id}"), &def);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    poll("every object checked", || (summary_state(&j, "ok") == 4).then_some(()));

    let b = Browser::start().await;
    open(&b, &j).await;
    let chips = b.until("web-1's labels", "const c = [...document.querySelectorAll('tr[data-id=\"web-1\"] .chip')].map(c => c.textContent); return c.length ? c.join(' ') : null;").await;
    assert_eq!(chips, "env=prod team=web");

    // db-1's target goes away: a check makes it soft critical 1/3, which reaches the page through the stream,
    // in the list of its hard state (ok), dashed and with its attempt.
    db_target.stop();
    assert_eq!(j.request("POST", "/api/objects/db-1/actions/check", &[], None).status, 200);
    let soft = b
        .until("db-1 soft on the page", "const r = document.querySelector('#list-rest tr[data-id=\"db-1\"]'); return r && r.dataset.soft ? r.dataset.soft : null;")
        .await;
    assert_eq!(soft, "critical 1/3");
    let cell = b.text("#list-rest tr[data-id=\"db-1\"] td.state").await.unwrap();
    assert!(cell.starts_with("critical 1/3") && cell.contains("hard state ok"), "{cell:?}");
    assert_eq!(
        b.js("return document.querySelector('#list-rest tr[data-id=\"db-1\"] .badge').className;", vec![]).await,
        "badge soft critical"
    );
    let output = b.text("#list-rest tr[data-id=\"db-1\"] td.output").await.unwrap();
    assert!(output.contains("refused"), "the soft attempt's output: {output:?}");
    assert_eq!(j.get("/api/objects/db-1").json()["state"], "ok", "the hard state is unchanged");

    // A label selector: the lists and the counts are of the objects it picks.
    b.type_into("#selector", "env=prod").await;
    b.until("only the prod objects", &format!("return {ROW_IDS} === 'db-1 web-1' || null;")).await;
    b.until("the counts of the prod objects", "return document.querySelector('#count-all').textContent === '2';").await;
    assert_eq!(b.text("#count-all-label").await.as_deref(), Some("objects the label selector picks"));
    // An invalid one: the server's reason by the box, nothing listed.
    set_control(&b, "#selector", "env in ()").await;
    let error = b
        .until(
            "the selector's error",
            "const e = document.querySelector('#selector-error').textContent; return e || null;",
        )
        .await;
    let error = error.as_str().unwrap();
    assert!(error.starts_with("selector \"env in ()\"") && error.contains("is empty"), "{error}");
    assert_eq!(b.js("return document.querySelector('#selector').getAttribute('aria-invalid');", vec![]).await, "true");
    assert_eq!(b.js(&format!("return {ROW_IDS};"), vec![]).await, "");
    set_control(&b, "#selector", "team notin (db)").await;
    b.until("the selector's error gone", "return document.querySelector('#selector-error').textContent === '';").await;
    b.until("every object but db-1", &format!("return {ROW_IDS} === 'api-1 batch web-1' || null;")).await;

    // Grouped by a label key the page has seen: a group per value, counted, those without the label last.
    set_control(&b, "#selector", "").await;
    b.until("every object again", &format!("return {ROW_IDS} === 'api-1 batch db-1 web-1' || null;")).await;
    let keys =
        b.js("return [...document.querySelectorAll('#group option')].map(o => o.value).join(' ');", vec![]).await;
    assert_eq!(keys, " env team");
    set_control(&b, "#group", "team").await;
    let groups = b
        .until("the groups", "const g = [...document.querySelectorAll('#list-rest tbody.group th')].map(t => t.textContent); return g.length ? g.join(' | ') : null;")
        .await;
    assert_eq!(groups, "team=api (1) | team=db (1) | team=web (1) | no team (1)");
    b.screenshot(&screenshot_path("status-page-labels.png")).await;

    // The object's page: its soft state, labels and the rules in force.
    b.client.goto(&format!("http://{}/#/object/db-1", j.addr)).await.unwrap();
    let soft = b
        .until(
            "the soft state on the object's page",
            "const d = document.querySelector('#object-soft'); return d ? d.textContent : null;",
        )
        .await;
    assert!(soft.as_str().unwrap().starts_with("critical 1/3 attempt 1 of 3"), "{soft}");
    let labels = b
        .js("return [...document.querySelectorAll('#object-labels .chip')].map(c => c.textContent).join(' ');", vec![]);
    assert_eq!(labels.await, "env=prod team=db");
    let rules = b.text("#object-rules").await.unwrap();
    assert!(rules.starts_with("hard after 3 problem results in a row, retried every 10m"), "{rules}");
    b.close().await;
}

/// The notification policy on the page: a silence made from the silences view (label selector, duration,
/// author) is listed as active and marks the objects it selects as silenced; an object whose parent is in a
/// problem is marked parent down; expiring the silence from the page lifts the mark, through the stream's
/// `policy` event.
#[tokio::test]
async fn a_silence_made_and_expired_from_the_page_marks_its_objects_and_a_parent_down_is_marked() {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let down = closed_port();
    define(&j, "switch", &down);
    let with = |extra: Value| {
        let mut def =
            json!({"probe": {"type": "tcp", "addr": down}, "interval": "1h", "timeout": "2s", "max_attempts": 1});
        def.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        def
    };
    assert_eq!(j.put("/api/objects/db", &with(json!({"labels": {"team": "db"}}))).status, 200);
    assert_eq!(j.put("/api/objects/host", &with(json!({"parents": ["switch"]}))).status, 200);
    poll("every object critical", || (summary_state(&j, "critical") == 3).then_some(()));

    let b = Browser::start().await;
    b.client.goto(&format!("http://{}/#/silences", j.addr)).await.expect("the page loads");
    b.until("the silences view drawn", "return document.querySelector('#no-silences') !== null;").await;
    b.type_into("#silence-selector", "team=db").await;
    b.type_into("#silence-author", "ana").await;
    b.click("#silence-form button[type=submit]").await;
    let notice = b.until("the silence's outcome", "const n = document.querySelector('#notice'); return !n.hidden && n.textContent.startsWith('silence ') ? n.textContent : null;").await;
    assert!(notice.as_str().unwrap().contains("team=db for 2h"), "{notice}");
    b.until(
        "the silence listed as active",
        "return document.querySelector('#silences tr[data-active=\"true\"]') !== null;",
    )
    .await;
    let listed = j.get("/api/silences").json();
    assert_eq!(listed["silences"][0]["selector"], "team=db", "{listed}");
    assert_eq!(listed["silences"][0]["author"], "ana", "{listed}");

    b.click("#nav-objects").await;
    let mark = |id: &str, reason: &str| {
        format!("return document.querySelector('#list-problems tr[data-id=\"{id}\"] .mark.held.{reason}') !== null;")
    };
    b.until("db marked silenced", &mark("db", "silenced")).await;
    b.until("host marked parent down", &mark("host", "parent_down")).await;
    assert_eq!(b.js(&mark("switch", "silenced"), vec![]).await, false, "switch is not selected");
    assert_eq!(j.get("/api/objects/host").json()["held"], json!({"reason": "parent_down", "by": ["switch"]}));

    // Expired from the page: the mark goes, as the stream's policy event reloads what the page shows.
    b.click("#nav-silences").await;
    b.until("the silence listed", "return document.querySelector('#silences button.expire') !== null;").await;
    b.click("#silences button.expire").await;
    b.until(
        "the silence listed as ended",
        "return document.querySelector('#silences tr[data-active=\"false\"]') !== null;",
    )
    .await;
    b.click("#nav-objects").await;
    b.until("db no longer marked", "const r = document.querySelector('#list-problems tr[data-id=\"db\"]'); return r !== null && r.querySelector('.mark.held') === null;").await;
    assert_eq!(j.get("/api/objects/db").json()["held"], Value::Null);
    b.close().await;
}
