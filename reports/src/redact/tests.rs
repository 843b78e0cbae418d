//! One test per secret form, the harmless arguments that must survive, and idempotence on odd text.

use super::marker::REDACTED;
use super::*;

fn r(args: &[&str]) -> Vec<String> {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    redact_cmdline(&v)
}

const GHP: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const JWT: &str =
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";

/// One secret form: an argv, what it must become, and the secret that must not survive.
struct Form {
    args: &'static [&'static str],
    want: &'static [&'static str],
    secret: &'static str,
}

const fn f(
    args: &'static [&'static str],
    want: &'static [&'static str],
    secret: &'static str,
) -> Form {
    Form { args, want, secret }
}

/// The 20 forms issue 13 found leaking, in its order.
const LEAKED_BEFORE: &[Form] = &[
    f(
        &[
            "curl",
            "-H",
            "Authorization: Bearer S3cr3tV4lue",
            "https://api.example/x",
        ],
        &[
            "curl",
            "-H",
            "Authorization: Bearer [REDACTED]",
            "https://api.example/x",
        ],
        "S3cr3tV4lue",
    ),
    f(
        &[
            "curl",
            "--header",
            "X-Api-Key: S3cr3tV4lue",
            "https://api.example/x",
        ],
        &[
            "curl",
            "--header",
            "X-Api-Key: [REDACTED]",
            "https://api.example/x",
        ],
        "S3cr3tV4lue",
    ),
    f(
        &["mysql", "-u", "root", "-p", "S3cr3tV4lue", "db"],
        &["mysql", "-u", "root", "-p", "[REDACTED]", "db"],
        "S3cr3tV4lue",
    ),
    f(
        &["mysql", "-u", "root", "-pS3cr3tV4lue", "db"],
        &["mysql", "-u", "root", "-p[REDACTED]", "db"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--pw=S3cr3tV4lue"],
        &["app", "--pw=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--privkey=S3cr3tV4lue"],
        &["app", "--privkey=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--jwt=S3cr3tV4lue"],
        &["app", "--jwt=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--session=S3cr3tV4lue"],
        &["app", "--session=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--creds=S3cr3tV4lue"],
        &["app", "--creds=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--bearer", "S3cr3tV4lue"],
        &["app", "--bearer", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--oauth2=S3cr3tV4lue"],
        &["app", "--oauth2=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--tok=S3cr3tV4lue"],
        &["app", "--tok=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--license", "S3cr3tV4lue"],
        &["app", "--license", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["app", "--db-password:S3cr3tV4lue"],
        &["app", "--db-password:[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &[
            "wget",
            "https://api.example/v1/x?access_token=S3cr3tV4lue&page=2",
        ],
        &[
            "wget",
            "https://api.example/v1/x?access_token=[REDACTED]&page=2",
        ],
        "S3cr3tV4lue",
    ),
    f(
        &[
            "notify",
            "https://hooks.slack.com/services/T000/B000/S3cr3tV4lue",
        ],
        &["notify", "https://hooks.slack.com/services/[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["curl", "-u", "alice:S3cr3tV4lue", "https://api.example/"],
        &["curl", "-u", "alice:[REDACTED]", "https://api.example/"],
        "S3cr3tV4lue",
    ),
    f(
        &["sshpass", "-p", "S3cr3tV4lue", "ssh", "-p", "2222", "host"],
        &["sshpass", "-p", "[REDACTED]", "ssh", "-p", "2222", "host"],
        "S3cr3tV4lue",
    ),
    f(
        &["mysql", "-h", "alice:S3cr3tV4lue@db.example"],
        &["mysql", "-h", "alice:[REDACTED]@db.example"],
        "S3cr3tV4lue",
    ),
    f(
        &["gh", "api", "--", GHP],
        &["gh", "api", "--", "ghp_[REDACTED]"],
        GHP,
    ),
    f(
        &["app", "--token", "--Xk9+tJw2Lq"],
        &["app", "--token", "[REDACTED]"],
        "Xk9+tJw2Lq",
    ),
];

/// The forms that were already hidden before issue 13 (the earlier tests), kept.
const HIDDEN_BEFORE: &[Form] = &[
    f(
        &["x", "--token=S3cr3tV4lue"],
        &["x", "--token=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--password=S3cr3tV4lue"],
        &["x", "--password=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--api-key=S3cr3tV4lue"],
        &["x", "--api-key=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--secret=S3cr3tV4lue"],
        &["x", "--secret=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--token", "S3cr3tV4lue"],
        &["x", "--token", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--hf-token", "S3cr3tV4lue"],
        &["x", "--hf-token", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--password", "S3cr3tV4lue"],
        &["x", "--password", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--apiKey", "S3cr3tV4lue"],
        &["x", "--apiKey", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--access_key=S3cr3tV4lue"],
        &["x", "--access_key=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--db.passwd=S3cr3tV4lue"],
        &["x", "--db.passwd=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "-secret=S3cr3tV4lue"],
        &["x", "-secret=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["env", "HF_TOKEN=S3cr3tV4lue"],
        &["env", "HF_TOKEN=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["env", "AWS_SECRET_ACCESS_KEY=S3cr3tV4lue"],
        &["env", "AWS_SECRET_ACCESS_KEY=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["env", "DB_PASSWORD_FILE=S3cr3tV4lue"],
        &["env", "DB_PASSWORD_FILE=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["env", "MY_KEY=S3cr3tV4lue"],
        &["env", "MY_KEY=[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &[
            "git",
            "clone",
            "https://user:S3cr3tV4lue@github.com/o/r.git",
        ],
        &["git", "clone", "https://[REDACTED]@github.com/o/r.git"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--url=http://S3cr3tV4lue@host:8080/x?q=1"],
        &["x", "--url=http://[REDACTED]@host:8080/x?q=1"],
        "S3cr3tV4lue",
    ),
    f(
        &["sh", "-c", "python t.py --token S3cr3tV4lue --lr 1"],
        &["sh", "-c", "python t.py --token [REDACTED] --lr 1"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--secrets", "S3cr3tV4lue"],
        &["x", "--secrets", "[REDACTED]"],
        "S3cr3tV4lue",
    ),
    f(
        &["x", "--githubToken=S3cr3tV4lue"],
        &["x", "--githubToken=[REDACTED]"],
        "S3cr3tV4lue",
    ),
];

/// Further forms: headers as words, token prefixes, URL shapes, per-command short flags.
// Kept one form per line, as a table.
#[rustfmt::skip]
const MORE: &[Form] = &[
    f(&["sh", "-c", "curl -H 'Authorization: Bearer S3cr3tV4lue' https://h/"],
      &["sh", "-c", "curl -H 'Authorization: Bearer [REDACTED]' https://h/"], "S3cr3tV4lue"),
    f(&["curl", "-H", "Cookie: session=S3cr3tV4lue"], &["curl", "-H", "Cookie: [REDACTED]"], "S3cr3tV4lue"),
    f(&["curl", "-H", "Private-Token:S3cr3tV4lue"], &["curl", "-H", "Private-Token:[REDACTED]"], "S3cr3tV4lue"),
    f(&["curl", "--header=X-Auth-Token:S3cr3tV4lue"], &["curl", "--header=X-Auth-Token:[REDACTED]"], "S3cr3tV4lue"),
    f(&["curl", "--user=alice:S3cr3tV4lue"], &["curl", "--user=alice:[REDACTED]"], "S3cr3tV4lue"),
    f(&["curl", "-ualice:S3cr3tV4lue"], &["curl", "-ualice:[REDACTED]"], "S3cr3tV4lue"),
    f(&["redis-cli", "-p", "6380", "-a", "S3cr3tV4lue"], &["redis-cli", "-p", "6380", "-a", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["mosquitto_pub", "-p", "1883", "-P", "S3cr3tV4lue"], &["mosquitto_pub", "-p", "1883", "-P", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["7z", "x", "-pS3cr3tV4lue", "a.7z"], &["7z", "x", "-p[REDACTED]", "a.7z"], "S3cr3tV4lue"),
    f(&["openssl", "enc", "-pass", "pass:S3cr3tV4lue"], &["openssl", "enc", "-pass", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["java", "-Djavax.net.ssl.keyStorePassword=S3cr3tV4lue", "-jar", "a.jar"],
      &["java", "-Djavax.net.ssl.keyStorePassword=[REDACTED]", "-jar", "a.jar"], "S3cr3tV4lue"),
    f(&["tool", "-p", "S3cr3tV4lue"], &["tool", "-p", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["tool", "-pS3cr3tV4lue"], &["tool", "-p[REDACTED]"], "S3cr3tV4lue"),
    f(&["notify", "https://discord.com/api/webhooks/123456/S3cr3tV4lue"],
      &["notify", "https://discord.com/api/webhooks/[REDACTED]"], "S3cr3tV4lue"),
    f(&["notify", "https://api.telegram.org/bot123456:S3cr3tV4lue/sendMessage"],
      &["notify", "https://api.telegram.org/bot[REDACTED]/sendMessage"], "S3cr3tV4lue"),
    f(&["aws", "s3", "cp", "https://b.s3.amazonaws.com/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=S3cr3tV4lue"],
      &["aws", "s3", "cp", "https://b.s3.amazonaws.com/o?X-Amz-Credential=[REDACTED]&X-Amz-Signature=[REDACTED]"], "S3cr3tV4lue"),
    f(&["az", "--connection-string", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=S3cr3tV4lue"],
      &["az", "--connection-string", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=[REDACTED]"], "S3cr3tV4lue"),
    f(&["app", "--opts=lr=1,api_token=S3cr3tV4lue"], &["app", "--opts=lr=1,api_token=[REDACTED]"], "S3cr3tV4lue"),
    f(&["env", "https_proxy=http://u:S3cr3tV4lue@proxy:3128"], &["env", "https_proxy=http://[REDACTED]@proxy:3128"], "S3cr3tV4lue"),
    f(&["psql", "postgres://app:S3cr3tV4lue@db/x"], &["psql", "postgres://[REDACTED]@db/x"], "S3cr3tV4lue"),
    f(&["app", "-password", "S3cr3tV4lue"], &["app", "-password", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["app", "--token", "two words"], &["app", "--token", "[REDACTED]"], "two words"),
    f(&["app", JWT], &["app", "[REDACTED]"], "dozjgNryP4J3"),
    f(&["app", "--x=gho_16C7e42F292c6912E7710c838347Ae178B4a"], &["app", "--x=gho_[REDACTED]"], "16C7e42F292c"),
    f(&["app", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"], &["app", "github_pat_[REDACTED]"], "11ABCDEFG0123456789"),
    f(&["app", "glpat-xY9zA8bC7dE6fG5hI4jK"], &["app", "glpat-[REDACTED]"], "xY9zA8bC7dE6fG5hI4jK"),
    f(&["app", "xoxb-1234567890-abcdefghij"], &["app", "xoxb-[REDACTED]"], "1234567890-abcdefghij"),
    f(&["app", "xoxp-1234567890-abcdefghij"], &["app", "xoxp-[REDACTED]"], "1234567890-abcdefghij"),
    f(&["app", "AKIAIOSFODNN7EXAMPLE"], &["app", "AKIA[REDACTED]"], "IOSFODNN7EXAMPLE"),
    f(&["app", "ASIAIOSFODNN7EXAMPLE"], &["app", "ASIA[REDACTED]"], "IOSFODNN7EXAMPLE"),
    f(&["app", "sk-proj-abc123DEF456ghi789JKL"], &["app", "sk-[REDACTED]"], "abc123DEF456"),
    f(&["app", "sk_live_51Habcdefghij"], &["app", "sk_live_[REDACTED]"], "51Habcdefghij"),
    f(&["app", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"], &["app", "hf_[REDACTED]"], "aBcDeFgHiJkLmNoPqRsT"),
    f(&["docker", "login", "-u", "bot", "-p", "S3cr3tV4lue", "registry.example"],
      &["docker", "login", "-u", "bot", "-p", "[REDACTED]", "registry.example"], "S3cr3tV4lue"),
    f(&["ssh-keygen", "-t", "ed25519", "-N", "S3cr3tV4lue", "-f", "k"],
      &["ssh-keygen", "-t", "ed25519", "-N", "[REDACTED]", "-f", "k"], "S3cr3tV4lue"),
    f(&["git", "config", "--global", "user.password", "S3cr3tV4lue"],
      &["git", "config", "--global", "user.password", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["aws", "configure", "set", "aws_secret_access_key", "S3cr3tV4lue"],
      &["aws", "configure", "set", "aws_secret_access_key", "[REDACTED]"], "S3cr3tV4lue"),
    f(&["sh", "-c", "echo ghp_16C7e42F292c6912E7710c838347Ae178B4a | gh auth login --with-token"],
      &["sh", "-c", "echo ghp_[REDACTED] | gh auth login --with-token"], "16C7e42F292c"),
];

/// The three forms issue 26 found leaking, and their relatives by the same rules: PEM blocks anywhere, secret keys
/// of JSON/YAML in an argument, JVM options named for a secret.
#[rustfmt::skip]
const ISSUE_26: &[Form] = &[
    f(&["app", "--tls", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nS3cr3tV4lue==\n-----END PRIVATE KEY-----"],
      &["app", "--tls", "-----BEGIN PRIVATE KEY-----\n[REDACTED]\n-----END PRIVATE KEY-----"], "S3cr3tV4lue"),
    f(&["app", "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjE S3cr3tV4lue"],
      &["app", "-----BEGIN OPENSSH PRIVATE KEY----- [REDACTED]"], "S3cr3tV4lue"),
    f(&["app", "-----BEGIN", "RSA", "PRIVATE", "KEY-----", "MIIEowIBAAKCAQEA", "S3cr3tV4lue", "-----END", "RSA", "PRIVATE", "KEY-----", "--v"],
      &["app", "-----BEGIN", "RSA", "PRIVATE", "KEY-----", "[REDACTED]", "[REDACTED]", "-----END", "RSA", "PRIVATE", "KEY-----", "--v"], "S3cr3tV4lue"),
    f(&["app", "--config", r#"{"token": "S3cr3tV4lue", "model": "llama"}"#],
      &["app", "--config", r#"{"token": "[REDACTED]", "model": "llama"}"#], "S3cr3tV4lue"),
    f(&["app", r#"{"db":{"user":"u","password":"S3cr3tV4lue"}}"#],
      &["app", r#"{"db":{"user":"u","password":"[REDACTED]"}}"#], "S3cr3tV4lue"),
    f(&["helm", "install", "x", "--set-json", r#"db={"apiKey":"S3cr3tV4lue"}"#],
      &["helm", "install", "x", "--set-json", r#"db={"apiKey":"[REDACTED]"}"#], "S3cr3tV4lue"),
    f(&["app", "--values", "db:\n  client_secret: S3cr3tV4lue\n  user: bob"],
      &["app", "--values", "db:\n  client_secret: [REDACTED]\n  user: bob"], "S3cr3tV4lue"),
    f(&["sh", "-c", r#"curl -d '{"password":"S3cr3tV4lue"}' https://x"#],
      &["sh", "-c", r#"curl -d '{"password":"[REDACTED]"}' https://x"#], "S3cr3tV4lue"),
    f(&["java", "-Xpassword", "S3cr3tV4lue", "-jar", "app.jar"],
      &["java", "-Xpassword", "[REDACTED]", "-jar", "app.jar"], "S3cr3tV4lue"),
    f(&["java", "-Xpassword:S3cr3tV4lue", "-XX:KeyStorePassword=S3cr3tV4lue", "-Dkey=S3cr3tV4lue", "Main"],
      &["java", "-Xpassword:[REDACTED]", "-XX:KeyStorePassword=[REDACTED]", "-Dkey=[REDACTED]", "Main"], "S3cr3tV4lue"),
    f(&["java", "-XapiToken", "S3cr3tV4lue", "-Dtrust.store.password", "S3cr3tV4lue"],
      &["java", "-XapiToken", "[REDACTED]", "-Dtrust.store.password", "[REDACTED]"], "S3cr3tV4lue"),
];

fn check(forms: &[Form]) {
    for form in forms {
        let got = r(form.args);
        assert_eq!(got, form.want, "input {:?}", form.args);
        assert!(
            got.iter().all(|a| !a.contains(form.secret)),
            "{:?} leaks {:?}",
            got,
            form.secret
        );
        assert_eq!(
            redact_cmdline(&got),
            got,
            "not idempotent on {:?}",
            form.args
        );
    }
}

#[test]
fn the_twenty_forms_that_leaked_are_hidden() {
    assert!(LEAKED_BEFORE.len() >= 20);
    check(LEAKED_BEFORE);
}

#[test]
fn the_forms_hidden_before_stay_hidden() {
    assert_eq!(HIDDEN_BEFORE.len(), 20);
    check(HIDDEN_BEFORE);
}

#[test]
fn pem_blocks_json_yaml_secrets_and_jvm_options_are_hidden() {
    check(ISSUE_26);
    // What the same rules leave alone.
    let harmless: &[&[&str]] = &[
        &[
            "java",
            "-Xmx4g",
            "-Xss512k",
            "-XX:+UseG1GC",
            "-XX:MaxRAMPercentage=75",
            "-Xlog:gc",
            "Main",
        ],
        &[
            "java",
            "-Dfile.encoding=UTF-8",
            "-Duser.timezone=UTC",
            "-XpasswordFile",
            "/etc/pw",
        ],
        &[
            "app",
            "--config",
            r#"{"model": "llama", "max_tokens": 64, "tokenizer": "t"}"#,
        ],
        &["app", "--cert", "-----BEGIN CERTIFICATE-----"],
        &["curl", "-X", "POST", "-D", "-", "https://x"],
        &["ssh", "-D", "1080", "host"],
    ];
    for args in harmless {
        assert_eq!(r(args), *args);
    }
}

#[test]
fn headers_urls_short_flags_and_token_prefixes() {
    check(MORE);
}

#[test]
fn short_p_is_a_port_or_switch_for_commands_that_say_so() {
    let harmless: &[&[&str]] = &[
        &["ssh", "-p", "2222", "host"],
        &["ssh", "-p2222", "host"],
        &["scp", "-p", "-P", "2222", "a", "h:b"],
        &["psql", "-h", "db", "-p", "5432", "-U", "app"],
        &["redis-cli", "-p", "6380"],
        &["docker", "run", "-p", "8080:80", "nginx"],
        &[
            "docker",
            "run",
            "-p",
            "8080:80",
            "-v",
            "/data/tokenizer_config.json:/c.json",
            "img",
        ],
        &[
            "python",
            "train.py",
            "--config",
            "conf/model_tokenizer.yaml",
            "--out",
            "/o",
        ],
        &["mkdir", "-p", "run/out"],
        &["strace", "-p", "4242"],
        &["patch", "-p1"],
        // Unknown commands: a number is a port or pid, a path a directory.
        &["tool", "-p", "8080"],
        &["tool", "-p", "/var/run/x"],
        &["tool", "-p", "-v"],
        &["tool", "-p0"],
    ];
    for args in harmless {
        assert_eq!(r(args), *args);
    }
    // The same words hidden where `-p` is a password.
    assert_eq!(
        r(&["sshpass", "-p", "2222"]),
        ["sshpass", "-p", "[REDACTED]"]
    );
    assert_eq!(r(&["mysql", "-p8080"]), ["mysql", "-p[REDACTED]"]);
    assert_eq!(r(&["tool", "-p", "run/out"]), ["tool", "-p", "[REDACTED]"]);
    // The command can change inside one argv (`sudo`, `timeout`, wrappers).
    assert_eq!(
        r(&[
            "sudo",
            "/usr/bin/sshpass",
            "-p",
            "hunter2",
            "ssh",
            "-p",
            "22",
            "h"
        ]),
        [
            "sudo",
            "/usr/bin/sshpass",
            "-p",
            "[REDACTED]",
            "ssh",
            "-p",
            "22",
            "h"
        ]
    );
}

#[test]
fn harmless_arguments_survive() {
    let harmless: &[&[&str]] = &[
        &[
            "python",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=8",
            "--keyboard",
            "x",
            "train.py",
        ],
        &[
            "vllm",
            "serve",
            "meta-llama/Llama-3-8B",
            "--tokenizer",
            "meta-llama/Llama-3-8B",
            "--max-tokens",
            "128",
        ],
        &[
            "gen",
            "--max_new_tokens",
            "256",
            "--pad-token-id",
            "0",
            "--tokenizer-mode=auto",
            "--num-tokens=4",
        ],
        &["x", "--use-auth-token", "--model", "m"],
        &["x", "--no-auth", "serve.py"],
        &[
            "x",
            "--lr=0.1",
            "--epochs",
            "3",
            "--data",
            "/data/a=b/key.bin",
        ],
        &["git", "clone", "git@github.com:o/r.git"],
        &[
            "curl",
            "-H",
            "Content-Type: application/json",
            "https://h/x?page=2&q=cat",
        ],
        &["curl", "-u", "alice", "https://h/"],
        &["docker", "run", "-u", "1000:1000", "img@sha256:0123abcd"],
        &["pull", "registry/img:1.2@sha256:0123abcd"],
        &["mail", "alice@example.com"],
        &[
            "x",
            "https://host/a@b",
            "https://api.github.com/repos/o/r/hooks",
        ],
        &[
            "pip",
            "install",
            "scikit-learn",
            "sk-learn-helpers",
            "task-abcdefghijklmnopqrstuvw",
        ],
        &["x", "AKIAIOSFODNN7EXAMPLEX"],
        &["x", "--model", "ghp_short"],
        &["sh", "-c", "python  train.py\t--lr 1"],
        &["x", "üñí©ødé", "--name=ĉu", "--"],
    ];
    for args in harmless {
        assert_eq!(r(args), *args);
    }
}

#[test]
fn url_and_text_helpers() {
    assert_eq!(
        redact_urls("no creds https://host/a@b"),
        "no creds https://host/a@b"
    );
    assert_eq!(
        redact_urls("a://x:y@h b://p:q@i"),
        "a://[REDACTED]@h b://[REDACTED]@i"
    );
    assert_eq!(
        redact_text("POST https://hooks.slack.com/services/T0/B0/XYZ with Bearer abc"),
        "POST https://hooks.slack.com/services/[REDACTED] with Bearer [REDACTED]"
    );
}

#[test]
fn mysql_attached_password_with_equals_is_hidden_and_stable() {
    let args: Vec<String> = vec!["mysql".into(), "-pA=AaA++A_=0A".into()];
    let out = redact_cmdline(&args);
    assert!(out.iter().all(|a| !a.contains("A=AaA++A_=0A")), "{out:?}");
    assert_eq!(redact_cmdline(&out), out, "{out:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Random secrets in each context that must hide them: none survives, the arity is kept, twice is once.
    #[test]
    fn random_secrets_never_survive(
        secret in "[A-Za-z0-9_+/=.-]{12,40}",
        form in 0usize..9,
        before in proptest::collection::vec("[a-z./]{1,8}", 0..3),
    ) {
        proptest::prop_assume!(!secret.starts_with('-'));
        // `alice://x…@db.example` is a URL by its syntax (scheme `alice`, authority `x…`), not `user:secret@host`.
        proptest::prop_assume!(form != 6 || !secret.starts_with("//"));
        let tail: Vec<String> = match form {
            0 => vec!["mysql".into(), format!("-p{secret}")],
            1 => vec!["sshpass".into(), "-p".into(), secret.clone()],
            2 => vec!["curl".into(), "-H".into(), format!("Authorization: Bearer {secret}")],
            3 => vec!["curl".into(), "--header".into(), format!("X-Api-Key: {secret}")],
            4 => vec!["curl".into(), "-u".into(), format!("alice:{secret}")],
            5 => vec![format!("https://h.example/x?access_token={secret}&a=1")],
            6 => vec![format!("alice:{secret}@db.example")],
            7 => vec!["sh".into(), "-c".into(), format!("tool --session {secret} --lr 1")],
            _ => vec![format!("https://hooks.slack.com/services/T0/B0/{secret}")],
        };
        let mut args = before.clone();
        args.extend(tail);
        let out = redact_cmdline(&args);
        proptest::prop_assert_eq!(out.len(), args.len());
        proptest::prop_assert!(out[before.len()..].iter().all(|a| !a.contains(&secret)), "{:?}", out);
        proptest::prop_assert_eq!(redact_cmdline(&out), out.clone());
    }

    /// Bare tokens by prefix, with random bodies of their real length.
    #[test]
    fn random_prefixed_tokens_never_survive(
        prefix in proptest::sample::select(vec!["ghp_", "gho_", "ghs_", "ghr_", "glpat-", "xoxb-", "xoxp-", "hf_", "sk-proj-"]),
        body in "[A-Za-z0-9]{36}",
        digit in 0u8..10,
    ) {
        let token = format!("{prefix}{body}{digit}");
        let out = redact_cmdline(&["run".to_string(), format!("--model={token}"), token.clone()]);
        proptest::prop_assert!(out.iter().all(|a| !a.contains(&body)), "{:?}", out);
    }
}

#[test]
fn redaction_is_idempotent_and_total_on_odd_text() {
    let odd: &[&str] = &[
        "",
        "-",
        "--",
        "=",
        ":",
        "@",
        "://",
        "a:@",
        ":b@c",
        "--=",
        "-=",
        "'",
        "\"\"",
        "-p",
        "--token",
        "Authorization:",
        "Authorization: ",
        "Bearer",
        "x=",
        "?a=&b",
        "eyJ",
        "ghp_",
        "é:é@é",
        "--é=é",
        "-é",
        "https://é@",
        "bot:",
        "a://b/webhooks/",
        " \t ",
        // Shapes of the inputs the fuzzer found not idempotent (fuzz/regressions/redact.*).
        "://c:?:?@:x",
        "c:?:?@:x",
        "a=b:c@d",
        "x=u:p=q@h",
        "-pA=B",
        "http]s://t:x?acen@=t&x=psp@h/x",
        "Authorization: Bearer",
        "key: key:",
        "x::?sig=x:x?:x",
        // The structured forms, cut anywhere.
        "-----BEGIN",
        "-----BEGIN X-----",
        "-----BEGIN X-----y",
        "-----END X-----",
        "{\"token\":",
        "{\"token\": \"",
        "{token: [",
        "a:\n  key: ",
        "-Xpassword",
        "-XX:",
        "-Dkey=",
    ];
    for a in odd {
        for b in odd {
            let args = vec![a.to_string(), b.to_string()];
            let once = redact_cmdline(&args);
            assert_eq!(redact_cmdline(&once), once, "{args:?}");
            let text = format!("{a} {b}");
            let once = redact_text(&text);
            assert_eq!(redact_text(&once), once, "{text:?}");
        }
    }
}

/// Issue 35: credentials inside URLs, by rule — `scheme://user:secret@host`, `scheme://:secret@host`,
/// `scheme://token@host` — whatever the scheme, wherever the URL sits (an argument, inside quotes or JSON, a
/// header), also when the secret holds characters a URL should have percent-encoded (`/` in an AWS secret key).
#[test]
fn url_credentials_are_hidden_by_rule() {
    const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let cases: &[(&str, &str, &str)] = &[
        // (text, what it must become, the secret that must not survive)
        (
            "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY@bucket/key/part-0.parquet",
            "s3://[REDACTED]@bucket/key/part-0.parquet",
            AWS_SECRET,
        ),
        (
            "postgres://app:Pa55w0rd@db.internal:5432/prod?sslmode=require",
            "postgres://[REDACTED]@db.internal:5432/prod?sslmode=require",
            "Pa55w0rd",
        ),
        ("redis://:r3disPass@cache:6379/0", "redis://[REDACTED]@cache:6379/0", "r3disPass"),
        (
            "amqp://guest:s3cr3t@rabbit.example:5672/vhost",
            "amqp://[REDACTED]@rabbit.example:5672/vhost",
            "s3cr3t",
        ),
        (
            "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/org/repo.git",
            "https://[REDACTED]@github.com/org/repo.git",
            "16C7e42F292c6912E7710c838347Ae178B4a",
        ),
        (
            "https://oauth2:glpat-abcdefghij0123456789@gitlab.example/x.git",
            "https://[REDACTED]@gitlab.example/x.git",
            "abcdefghij0123456789",
        ),
        (
            "git+ssh://deploy:hunter2hunter2@git.example/repo.git",
            "git+ssh://[REDACTED]@git.example/repo.git",
            "hunter2hunter2",
        ),
        (
            "mongodb+srv://u:p%40ss%2Fw0rd@cluster0.example/db",
            "mongodb+srv://[REDACTED]@cluster0.example/db",
            "p%40ss%2Fw0rd",
        ),
        (
            "postgres://u:raw@pass@db/x",
            "postgres://[REDACTED]@db/x",
            "raw@pass",
        ),
        (
            r#"{"url": "redis://default:0ddS3cret@r.example:6380"}"#,
            r#"{"url": "redis://[REDACTED]@r.example:6380"}"#,
            "0ddS3cret",
        ),
        (
            "DATABASE_URL='mysql://root:t0ps3cret@127.0.0.1/app'",
            "DATABASE_URL='mysql://[REDACTED]@127.0.0.1/app'",
            "t0ps3cret",
        ),
        (
            "--source=s3://AKIAIOSFODNN7EXAMPLE:a/b+c/d@bkt/p",
            "--source=s3://[REDACTED]@bkt/p",
            "a/b+c/d",
        ),
        (
            "<https://user:pw0rd@host.example/x>",
            "<https://[REDACTED]@host.example/x>",
            "pw0rd",
        ),
    ];
    for (text, want, secret) in cases {
        for got in [redact_text(text), redact_urls(text), r(&[text])[0].clone()] {
            assert_eq!(&got, want, "{text}");
            assert!(!got.contains(secret), "{text} → {got}");
            assert_eq!(redact_text(&got), got, "not idempotent on {text}");
        }
    }
    // Inside a longer command line, too.
    let got = r(&["aws", "s3", "cp", cases[0].0, "/data/"]);
    assert_eq!(got[3], cases[0].1);
}

/// URLs without userinfo are left exactly as they are, `@` in their path or query included.
#[test]
fn urls_without_credentials_are_untouched() {
    for text in [
        "https://example.com/path?q=1#frag",
        "https://mastodon.social/@alice/1234",
        "https://registry.npmjs.org/@scope/pkg",
        "https://example.com:8443/users/@bob",
        "http://[::1]:8080/x@y",
        "https://medium.com/@writer/post?ref=a@b.example",
        "s3://bucket/key@2x.png",
        "file:///var/log/x@y.log",
        "postgres://db.internal:5432/prod",
        "see https://example.com/a:b@c later",
    ] {
        assert_eq!(redact_text(text), text);
        assert_eq!(redact_urls(text), text);
        assert_eq!(r(&[text]), vec![text.to_string()]);
    }
}
/// A URL whose last path segment happens to be a command's name (`…/7z`, `…/mysql`) is a URL, not that command:
/// its secret is hidden (proptest found `https://hooks.slack.com/services/T0/B0/=__0=A+0=/7z` kept whole).
#[test]
fn a_url_ending_in_a_commands_name_is_still_a_url() {
    for tail in ["7z", "mysql", "sshpass", "redis-cli"] {
        let url = format!("https://hooks.slack.com/services/T0/B0/=__0=A+0=/{tail}");
        let out = redact_cmdline(std::slice::from_ref(&url));
        assert_eq!(
            out,
            vec!["https://hooks.slack.com/services/[REDACTED]".to_string()],
            "{url}"
        );
        let out = redact_cmdline(&[format!(
            "https://h.example/x/{tail}?access_token=S3cr3tV4lue"
        )]);
        assert!(!out[0].contains("S3cr3tV4lue"), "{out:?}");
    }
    // A real command path still is one.
    let out = redact_cmdline(&[
        "/usr/bin/7z".into(),
        "x".into(),
        "-pS3cr3tV4lue".into(),
        "a.7z".into(),
    ]);
    assert!(!out.iter().any(|a| a.contains("S3cr3tV4lue")), "{out:?}");
}
/// A password glued to a password flag is hidden whole even when it reads as a secret-named pair
/// (proptest: `mysql -pAa_A00a00Pw=` kept `Aa_A00a00Pw`, taken for a flag named `pAa_A00a00Pw`).
#[test]
fn a_glued_password_that_reads_as_a_secret_pair_is_hidden_whole() {
    for (command, arg) in [
        ("mysql", "-pAa_A00a00Pw="),
        ("7z", "-pMyPassword=x"),
        ("redis-cli", "-aToken=1"),
    ] {
        let out = redact_cmdline(&[command.to_string(), arg.to_string()]);
        assert_eq!(
            out[1],
            format!("{}{REDACTED}", &arg[..2]),
            "{command} {arg}: {out:?}"
        );
    }
}
