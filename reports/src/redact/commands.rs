//! Commands whose short flags are known (`mysql -pV` is a password, `ssh -p 22` a port).

/// What `-p` means for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShortP {
    /// `mysql -pV`, `sshpass -p V`: always a password.
    Password,
    /// `ssh -p 22`, `mkdir -p dir`, `strace -p 42`: a port, pid or switch; never hidden.
    NotSecret,
    /// Anything else: hidden unless it is a number (port, pid, `patch -p1`) or, as a separate value, a path.
    Unknown,
}

/// How a command's short flags are judged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Command {
    pub(super) p: ShortP,
    /// Other short flags whose value is a password (`redis-cli -a`, `mosquitto_pub -P`, `zip -P`, `openssl -k`).
    pub(super) secret_short: &'static [char],
    /// Short and long flags taking `user:password` (`curl -u`, `http -a`).
    pub(super) user_pass_short: &'static [char],
    pub(super) user_pass_long: &'static [&'static str],
    /// A subcommand after which `-p` is a password (`docker login -p V`, while `docker run -p 8080:80`).
    pub(super) login: bool,
}

pub(super) const UNKNOWN_COMMAND: Command = Command {
    p: ShortP::Unknown,
    secret_short: &[],
    user_pass_short: &[],
    user_pass_long: &[],
    login: false,
};

pub(super) const fn command(p: ShortP) -> Command {
    Command {
        p,
        ..UNKNOWN_COMMAND
    }
}

/// Commands whose flags are known, by the basename of the program.
pub(super) fn known_command(word: &str) -> Option<Command> {
    // A command is named by a file path: a URL, a `k=v` pair or a `user@host` that ends in `/7z` is not one.
    if word.contains("://") || word.contains(['=', '?', '@', '#']) {
        return None;
    }
    let name = word.rsplit('/').next().unwrap_or(word);
    let c = match name {
        "mysql" | "mysqldump" | "mysqladmin" | "mysqlimport" | "mysqlshow" | "mysqlcheck"
        | "mysqlpump" | "mysqlsh" | "mariadb" | "mariadb-dump" | "mariadb-admin" | "sshpass"
        | "mongo" | "mongosh" | "mongodump" | "mongorestore" | "mongoexport" | "mongoimport"
        | "mongostat" | "mongotop" | "7z" | "7za" | "7zr" | "rar" | "unrar" => {
            command(ShortP::Password)
        }
        "redis-cli" => Command {
            secret_short: &['a'],
            ..command(ShortP::NotSecret)
        },
        "mosquitto_pub" | "mosquitto_sub" | "mosquitto_rr" | "zip" | "unzip" => Command {
            secret_short: &['P'],
            ..command(ShortP::NotSecret)
        },
        "openssl" => Command {
            secret_short: &['k'],
            ..command(ShortP::NotSecret)
        },
        "curl" => Command {
            user_pass_short: &['u', 'U'],
            user_pass_long: &["user", "proxy-user"],
            ..command(ShortP::NotSecret)
        },
        "http" | "https" | "httpie" => Command {
            user_pass_short: &['a'],
            ..command(ShortP::NotSecret)
        },
        "docker" | "podman" | "nerdctl" | "buildah" | "skopeo" | "helm" | "oras" => Command {
            login: true,
            ..command(ShortP::NotSecret)
        },
        "ssh-keygen" => Command {
            secret_short: &['N', 'P'],
            ..command(ShortP::NotSecret)
        },
        "ssh" | "autossh" | "mosh" | "scp" | "sftp" | "rsync" | "psql" | "pg_dump"
        | "pg_dumpall" | "pg_restore" | "pg_basebackup" | "pg_isready" | "pgbench" | "createdb"
        | "dropdb" | "redis-server" | "redis-benchmark" | "nc" | "ncat" | "netcat" | "socat"
        | "nmap" | "telnet" | "ping" | "iperf" | "iperf3" | "kubectl" | "mkdir" | "cp" | "ls"
        | "tar" | "patch" | "git" | "strace" | "ltrace" | "gdb" | "perf" | "lsof" | "ps"
        | "pgrep" | "pkill" | "top" | "htop" | "taskset" | "renice" | "prlimit" | "pidstat"
        | "kill" | "py-spy" | "nvidia-smi" => command(ShortP::NotSecret),
        _ => return None,
    };
    Some(c)
}
