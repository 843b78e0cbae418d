//! Property tests: hostile text anywhere in an incident never panics the renderer, never breaks its structure and
//! never passes the size cap; secrets given to secret-looking flags never survive redaction.

mod common;

use proptest::prelude::*;
use reports::limits::MAX_MARKDOWN_CHARS;
use reports::model::{KernelLogLine, NotCaptured};
use reports::redact::redact_cmdline;
use reports::render::markdown;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        "[`|<>&\\n\\r\\t *_#\\[\\]()!-]{0,30}",
        proptest::collection::vec(any::<char>(), 0..60).prop_map(|v| v.into_iter().collect()),
        (0usize..5000).prop_map(|n| "é`".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn hostile_text_renders_within_the_cap(
        comm in text(), wchan in text(), verdict in text(), kmsg in proptest::collection::vec(text(), 0..20),
        arg in text(), what in text(), site in text(), label in text(),
    ) {
        let mut inc = common::incident();
        let t = &mut inc.samples[1].snapshot.threads[0];
        t.comm = comm;
        t.wchan = Some(wchan);
        t.site = Some(site);
        inc.verdict = verdict;
        inc.kernel_log.extend(kmsg.into_iter().map(|k| KernelLogLine::new(None, None, Some(1), k)));
        inc.process.cmdline.as_mut().unwrap().push(arg);
        inc.not_captured.push(NotCaptured { what, why: String::new() });
        inc.ring.as_mut().unwrap().records[0].label = label;
        let md = markdown(&inc);
        prop_assert!(md.chars().count() <= MAX_MARKDOWN_CHARS);
        let opens = md.lines().filter(|l| l.starts_with("<details>")).count();
        let closes = md.lines().filter(|l| *l == "</details>").count();
        prop_assert_eq!(opens, closes);
        prop_assert_eq!(md.lines().filter(|l| l.starts_with("```")).count() % 2, 0);
        // A name holding backticks is a code span fenced past them: a fence of backticks may sit inside one, never
        // outside.
        prop_assert!(md.lines().all(|l| l.starts_with("```")
            || !capture::escape::outside_code_spans(l).contains("```")));
    }

    #[test]
    fn secret_flag_values_never_survive(
        flag in prop_oneof![Just("--token"), Just("--password"), Just("--api-key"), Just("--secret"), Just("--hf_token")],
        value in "[A-Za-z0-9_+/=.:@-]{6,40}",
        before in proptest::collection::vec("[a-z.]{1,8}", 0..4),
        joined in any::<bool>(),
    ) {
        prop_assume!(!value.starts_with("--"));
        let mut args: Vec<String> = before.clone();
        if joined {
            args.push(format!("{flag}={value}"));
        } else {
            args.push(flag.to_string());
            args.push(value.clone());
        }
        args.push("train.py".into());
        let out = redact_cmdline(&args);
        let tail = &out[before.len()..];
        prop_assert!(tail.iter().all(|a| !a.contains(&value)), "{:?}", out);
        prop_assert_eq!(out.len(), args.len());
        prop_assert_eq!(&out[..before.len()], &before[..]);
    }

    #[test]
    fn url_passwords_never_survive(user in "[a-z]{1,8}", pass in "[A-Za-z0-9]{6,20}", host in "[a-z]{1,10}\\.example") {
        let out = redact_cmdline(&[format!("https://{user}:{pass}@{host}/x")]);
        prop_assert!(!out[0].contains(&pass));
        let suffix = format!("@{}/x", host);
        prop_assert!(out[0].ends_with(&suffix));
    }
}
