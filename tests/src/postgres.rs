//! A real PostgreSQL server for the tests of the sink's store: a cluster of its own in a temp dir under /tmp,
//! on a free 127.0.0.1 port (never 5432), password authentication (SCRAM) for the superuser `jaque`, and TLS
//! when asked. It is started, restarted, killed and stopped by the postmaster's own PID, and nothing else.
//!
//! As root (CI) the server runs as the unprivileged user `scripts/install-postgres.sh` creates, because initdb
//! and postgres refuse to run as root. The switch happens in the spawned process itself (`CommandExt::uid`),
//! not through `runuser`: runuser stays the parent, so its PID is not the postmaster's, a SIGKILL to it leaves
//! the server running, and it turns SIGINT into SIGTERM (a smart shutdown instead of a fast one).

use crate::{poll, Output, Proc};
use std::fs;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The system user the server runs as when the tests run as root.
pub const SERVER_USER: &str = "jaque-pg";
/// The superuser initdb creates; the URL's user.
pub const USER: &str = "jaque";
/// The database `start` creates; the URL's database.
pub const DATABASE: &str = "jaque";

/// `JAQUE_POSTGRES_BIN` (a directory holding initdb, postgres, pg_isready and psql), else the newest Debian
/// server (`/usr/lib/postgresql/<version>/bin`), else the directory of `initdb` in PATH.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JAQUE_POSTGRES_BIN") {
        return PathBuf::from(dir);
    }
    let debian = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .max();
    if let Some((_, bin)) = debian {
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).find(|d| d.join("initdb").is_file()).unwrap_or_else(|| {
        panic!(
            "PostgreSQL not found: run scripts/install-postgres.sh (scripts/test.sh does) or set JAQUE_POSTGRES_BIN \
             to the directory holding initdb and postgres"
        )
    })
}

/// `psql` with `url` and `args` after it: only the URL decides where and how to connect (no PGHOST, PGSSLMODE,
/// PGPASSWORD from the environment), no `~/.psqlrc` (-X), never a password prompt (-w: a refused one is an error,
/// not a hang), stopping at the first error.
fn psql(url: &str) -> Command {
    let psql = bin_dir().join("psql");
    let mut cmd = Command::new(if psql.is_file() { psql } else { PathBuf::from("psql") });
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.env("PGCONNECT_TIMEOUT", "10");
    cmd.args(["-X", "-w", "-v", "ON_ERROR_STOP=1", "-d", url]).stdin(Stdio::null());
    cmd
}

/// `psql -f file` against `url` (a dump, a script), stopping at the first error; panics with psql's words.
pub fn psql_file(url: &str, file: &Path) {
    let out = psql(url).args(["-q", "-f"]).arg(file).output().expect("running psql");
    assert!(out.status.success(), "psql -f {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
}

/// Runs `psql -At` with `url` (any libpq URL: another password, `sslmode=...`) and `sql`: the rows, one per line,
/// columns separated by `|`, or what psql said when it could not connect or the SQL failed.
pub fn psql_at(url: &str, sql: &str) -> Result<String, String> {
    let out = psql(url).args(["-At", "-c", sql]).output().map_err(|e| format!("running psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_string())
    } else {
        Err(format!("psql exited {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim_end()))
    }
}

/// How the server takes connections over TCP.
enum Tls<'a> {
    Off,
    /// `ssl=on` with this certificate and key; plain connections still allowed.
    On {
        cert_pem: &'a str,
        key_pem: &'a str,
    },
    /// Like `On`, and pg_hba has only `hostssl` lines: a connection without TLS is refused.
    Only {
        cert_pem: &'a str,
        key_pem: &'a str,
    },
}

/// A PostgreSQL server of the test's own. Dropping it shuts the server down (immediate shutdown, then SIGKILL if
/// it hangs) and removes its files.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// uid and gid of `SERVER_USER` when the tests run as root; None: the server runs as the test's user.
    owner: Option<(u32, u32)>,
    port: u16,
    password: String,
    tls: bool,
    /// None while stopped or killed.
    proc: Option<Proc>,
    /// The server's log, every run of it.
    output: Output,
}

impl Postgres {
    /// A fresh server, plain TCP, with the database `jaque`.
    pub fn start() -> Postgres {
        Postgres::launch(Tls::Off)
    }

    /// A server with `ssl=on` and this certificate and key (PEM); plain connections are still allowed, so
    /// `sslmode=verify-full&sslrootcert=<ca file>` and `sslmode=disable` both connect.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Postgres {
        Postgres::launch(Tls::On { cert_pem, key_pem })
    }

    /// Like `start_tls`, but pg_hba allows TLS connections only (`hostssl`): `sslmode=disable` is refused.
    pub fn start_tls_only(cert_pem: &str, key_pem: &str) -> Postgres {
        Postgres::launch(Tls::Only { cert_pem, key_pem })
    }

    fn launch(tls: Tls) -> Postgres {
        let bin = bin_dir();
        let owner = server_owner();
        // Under /tmp (mode 1777) whatever TMPDIR says: the server's user must reach its directory, and a
        // TMPDIR under root's home would not let it.
        let dir = tempfile::Builder::new().prefix("jaque-pg-").tempdir_in("/tmp").expect("a temp dir under /tmp");
        let password =
            format!("pw{:016x}", std::collections::hash_map::RandomState::new().hash_one(std::process::id()));
        let mut pg = Postgres {
            dir,
            bin,
            owner,
            port: 0,
            password,
            tls: !matches!(tls, Tls::Off),
            proc: None,
            output: Output::default(),
        };
        pg.init(&tls);
        // The port is free when picked and taken a moment later by postgres; another process may slip in
        // between, so a start that cannot bind picks again.
        for attempt in 1.. {
            pg.port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            match pg.run() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("could not bind") => continue,
                Err(log) => panic!("postgres did not start; its log:\n{log}"),
            }
        }
        let admin = format!("postgres://{USER}:{}@127.0.0.1:{}/postgres", pg.password, pg.port);
        psql_at(&admin, &format!("CREATE DATABASE {DATABASE}"))
            .unwrap_or_else(|e| panic!("creating the database {DATABASE}: {e}\n{}", pg.log()));
        pg
    }

    /// initdb, and the TLS files and pg_hba it asks for.
    fn init(&self, tls: &Tls) {
        let dir = self.dir.path();
        let pwfile = dir.join("pwfile");
        fs::write(&pwfile, format!("{}\n", self.password)).expect("writing the password file");
        fs::create_dir(self.socket_dir()).expect("creating the socket dir");
        for path in [dir, &pwfile, &self.socket_dir()] {
            self.give(path);
        }
        let mut initdb = self.server_command("initdb");
        initdb
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", USER, "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()));
        let out = initdb.output().expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        fs::remove_file(&pwfile).expect("removing the password file");

        let (Tls::On { cert_pem, key_pem } | Tls::Only { cert_pem, key_pem }) = tls else { return };
        let data = self.data_dir();
        fs::write(data.join("server.crt"), cert_pem).expect("writing server.crt");
        fs::write(data.join("server.key"), key_pem).expect("writing server.key");
        // postgres refuses a key others can read.
        fs::set_permissions(data.join("server.key"), fs::Permissions::from_mode(0o600)).expect("chmod server.key");
        self.give(&data.join("server.crt"));
        self.give(&data.join("server.key"));
        if matches!(tls, Tls::Only { .. }) {
            // Replaces initdb's `host` lines (which match TLS and plain alike); the file keeps its owner.
            fs::write(
                data.join("pg_hba.conf"),
                "local all all scram-sha-256\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )
            .expect("writing pg_hba.conf");
        }
    }

    /// Starts postgres on `self.port` and waits until it accepts connections; the log of this run if it exits
    /// first.
    fn run(&mut self) -> Result<(), String> {
        assert!(self.proc.is_none(), "postgres is already running");
        let mut cmd = self.server_command("postgres");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1", "-k"])
            .arg(self.socket_dir());
        if self.tls {
            cmd.args(["-c", "ssl=on", "-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key"]);
        }
        let before = self.output.text().len();
        let mut proc = Proc::spawn_into("postgres", cmd, self.output.clone());
        let port = self.port.to_string();
        let isready = self.bin.join("pg_isready");
        let ready = poll("postgres to accept connections", || {
            if let Ok(Some(status)) = proc.child.try_wait() {
                return Some(Err(status));
            }
            let status = Command::new(&isready)
                .args(["-q", "-h", "127.0.0.1", "-p", &port, "-U", USER, "-d", "postgres"])
                .stdin(Stdio::null())
                .status();
            status.is_ok_and(|s| s.success()).then_some(Ok(()))
        });
        match ready {
            Ok(()) => {
                self.proc = Some(proc);
                Ok(())
            }
            Err(status) => {
                proc.wait_exit();
                let log = self.output.text();
                Err(format!("postgres exited ({status}):\n{}", &log[before.min(log.len())..]))
            }
        }
    }

    /// `postgres://jaque:<password>@127.0.0.1:<port>/jaque`; add `?sslmode=...` for TLS.
    pub fn url(&self) -> String {
        format!("postgres://{USER}:{}@127.0.0.1:{}/{DATABASE}", self.password, self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    /// The cluster's directory (postgresql.conf, pg_hba.conf, the server's files).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The postmaster's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid())
    }

    /// The server's log (stderr) over all its runs, for a failing test to print.
    pub fn log(&self) -> String {
        self.output.text()
    }

    /// `sql` run by psql against `url()`: the rows, `|` between columns. Fails the test (with the server's log)
    /// if psql cannot connect or the SQL fails; use `psql_at` to expect a refusal.
    pub fn psql(&self, sql: &str) -> String {
        psql_at(&self.url(), sql)
            .unwrap_or_else(|e| panic!("psql {sql:?}: {e}\n---- postgres log ----\n{}", self.log()))
    }

    /// Fast shutdown (SIGINT to the postmaster: clients are disconnected, a checkpoint written), then the same
    /// server again on the same port and data dir. Clients must reconnect by themselves.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Fast shutdown (SIGINT), waiting until the postmaster (and with it every backend) has exited.
    pub fn stop(&mut self) {
        let mut proc = self.proc.take().expect("stop: postgres is not running");
        proc.signal("INT");
        proc.wait_exit();
    }

    /// A crash: SIGKILL to the postmaster. Returns once its backends, which notice their parent is gone, have
    /// exited too (they still hold the shared memory a new postmaster would refuse to share).
    pub fn kill(&mut self) {
        let segment = self.shared_memory_id();
        let mut proc = self.proc.take().expect("kill: postgres is not running");
        proc.signal("KILL");
        proc.wait_exit();
        if let Some(id) = segment {
            poll("the killed postgres's backends to exit", || (!segment_attached(&id)).then_some(()));
        }
    }

    /// Starts the server again after `stop` or `kill` (crash recovery replays the WAL), on the same port.
    pub fn start_again(&mut self) {
        if let Err(log) = self.run() {
            panic!("postgres did not start again on port {}; its log:\n{log}", self.port);
        }
    }

    /// The SysV shared memory segment of the running server, from `postmaster.pid` (line 7: key and id).
    fn shared_memory_id(&self) -> Option<String> {
        let pidfile = fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        pidfile.lines().nth(6)?.split_whitespace().nth(1).map(str::to_string)
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    /// A command of the server's binaries, run as the server's user, in its own directory (a tool that cannot
    /// enter its working directory warns).
    fn server_command(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(name));
        cmd.current_dir(self.dir.path());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Makes `path` the server user's (when running as root).
    fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {} to {SERVER_USER}: {e}", path.display()));
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let Some(mut proc) = self.proc.take() else {
            if thread::panicking() {
                eprintln!("---- postgres log ----\n{}", self.log());
            }
            return;
        };
        // Immediate shutdown: the postmaster ends its backends and waits for them, so nothing of this server
        // outlives its temp dir. No panics here (a drop while panicking would abort): bounded waits, then SIGKILL.
        let segment = self.shared_memory_id();
        let _ = Command::new("kill").arg("-QUIT").arg(proc.pid().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(proc.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        // Kills it if it is still there, and prints the log if the test failed.
        drop(proc);
        if let Some(id) = segment {
            while segment_attached(&id) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// uid and gid of `SERVER_USER` if this process is root, else None.
fn server_owner() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|_| out.status.success())
    };
    if id(&["-u"]) != Some(0) {
        return None;
    }
    match (id(&["-u", SERVER_USER]), id(&["-g", SERVER_USER])) {
        (Some(uid), Some(gid)) => Some((uid, gid)),
        _ => panic!(
            "running as root, and there is no user {SERVER_USER} to run postgres as (it refuses root): run \
             scripts/install-postgres.sh (scripts/test.sh does)"
        ),
    }
}

/// Whether any process still has the SysV shared memory segment `id` attached (`/proc/sysvipc/shm`: the second
/// column is the id, the seventh the number of attached processes). False when it is gone or cannot be read.
fn segment_attached(id: &str) -> bool {
    let Ok(table) = fs::read_to_string("/proc/sysvipc/shm") else { return false };
    table.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        cols.get(1) == Some(&id) && cols.get(6).is_some_and(|n| *n != "0")
    })
}
