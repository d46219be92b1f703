use super::*;
use arbiter_llm::schema::{Dialect, fit_to_variant, normalise, violations};
use arbiter_llm::structured::parse_with;
use arbiter_protocol::{ArbiterIntent, SummonStrategy};

fn full() -> Offer {
    Offer::of(&Config::default())
}

fn small() -> Offer {
    let mut config = Config::default();
    config.model.profile = Profile::Small;
    Offer::of(&config)
}

#[test]
fn every_intent_and_strategy_is_accepted() {
    let schema = arbiter_schema(&full());
    let cases = [
        (
            r#"{"intent":"address_human","message":"Speak.","memory":["a fact"]}"#,
            ArbiterIntent::AddressHuman,
            None,
        ),
        (
            r#"{"intent":"address_orchestrator","message":"Go on.","members":[2]}"#,
            ArbiterIntent::AddressOrchestrator,
            None,
        ),
        (
            r#"{"intent":"release_orchestrators","message":"It is done."}"#,
            ArbiterIntent::ReleaseOrchestrators,
            None,
        ),
        (
            r#"{"intent":"musings","message":"Hm."}"#,
            ArbiterIntent::Musings,
            None,
        ),
        (
            r#"{"intent":"summon_orchestrator","message":"Brief.","pool":"gpu","runtime":"codex","risk":8,"policy":"mode ask"}"#,
            ArbiterIntent::SummonOrchestrator,
            None,
        ),
        (
            r#"{"intent":"summon_orchestrator","message":"Brief.","strategy":"solo"}"#,
            ArbiterIntent::SummonOrchestrator,
            Some(SummonStrategy::Solo),
        ),
        (
            r#"{"intent":"summon_orchestrator","message":"Team.","strategy":"parallel","count":2}"#,
            ArbiterIntent::SummonOrchestrator,
            Some(SummonStrategy::Parallel),
        ),
        (
            r#"{"intent":"summon_orchestrator","message":"Chain.","strategy":"sequential","briefs":["plan","do"]}"#,
            ArbiterIntent::SummonOrchestrator,
            Some(SummonStrategy::Sequential),
        ),
        (
            r#"{"intent":"summon_orchestrator","message":"Ship?","strategy":"consensus","count":3,"directive":{"words":"ask three"}}"#,
            ArbiterIntent::SummonOrchestrator,
            Some(SummonStrategy::Consensus),
        ),
    ];
    for (reply, intent, strategy) in cases {
        let output: ArbiterOutput =
            parse_with(reply, &schema).unwrap_or_else(|e| panic!("{reply}: {e}"));
        assert_eq!(
            (output.intent, output.strategy),
            (intent, strategy),
            "{reply}"
        );
    }
}

#[test]
fn fields_that_do_not_belong_are_dropped_not_refused() {
    let schema = arbiter_schema(&full());
    // (reply, the fields dropped, what is left of the summons)
    let cases: [(&str, &[&str]); 4] = [
        // A small model's solo summons with the team fields filled in.
        (
            r#"{"intent":"summon_orchestrator","message":"Create hello.py.","count":3,"briefs":["a","b","c"]}"#,
            &["briefs", "count"],
        ),
        // A word to the human with a summons' fields.
        (
            r#"{"intent":"address_human","message":"Speak.","pool":"native","complexity":2,"strategy":"solo"}"#,
            &["complexity", "pool", "strategy"],
        ),
        // OpenAI strict's flat form: every field, null where unused.
        (
            r#"{"intent":"musings","message":"Hm.","pool":null,"count":null,"memory":null}"#,
            &[],
        ),
        // A consensus does not take briefs.
        (
            r#"{"intent":"summon_orchestrator","message":"Ship?","strategy":"consensus","briefs":["x"]}"#,
            &["briefs"],
        ),
    ];
    for (reply, dropped) in cases {
        let mut value: Value = serde_json::from_str(reply).unwrap();
        assert_eq!(fit_to_variant(&mut value, &schema), dropped, "{reply}");
        let output: ArbiterOutput =
            parse_with(reply, &schema).unwrap_or_else(|e| panic!("{reply}: {e}"));
        assert_eq!(
            (output.count, output.briefs, output.pool),
            (None, None, None)
        );
    }
    // The small profile has no teams: a strategy is dropped and it stays solo.
    let schema = arbiter_schema(&small());
    let output: ArbiterOutput = parse_with(
        r#"{"intent":"summon_orchestrator","message":"Do it.","strategy":"parallel","count":3,"runtime":"claude-code","directive":{"words":"x"}}"#,
        &schema,
    )
    .unwrap();
    assert_eq!(
        output,
        ArbiterOutput::new(ArbiterIntent::SummonOrchestrator, "Do it.")
    );
}

#[test]
fn a_pool_or_runtime_not_offered_cannot_be_written() {
    let offer = Offer {
        pools: Some(vec!["default".into(), "gpu".into()]),
        runtimes: Some(vec!["native".into(), "codex".into()]),
        ..full()
    };
    let schema = arbiter_schema(&offer);
    let ok: ArbiterOutput = parse_with(
        r#"{"intent":"summon_orchestrator","message":"B.","pool":"gpu","runtime":"codex"}"#,
        &schema,
    )
    .unwrap();
    assert_eq!(ok.pool.as_deref(), Some("gpu"));
    for reply in [
        r#"{"intent":"summon_orchestrator","message":"B.","pool":"native"}"#,
        r#"{"intent":"summon_orchestrator","message":"B.","runtime":"claude-code"}"#,
    ] {
        assert!(
            parse_with::<ArbiterOutput>(reply, &schema).is_err(),
            "{reply}"
        );
    }
    // In every dialect the pool is an enum of the two.
    for dialect in [Dialect::Anthropic, Dialect::OpenAiStrict, Dialect::Grammar] {
        let mut wire = schema.clone();
        normalise(&mut wire, dialect);
        let text = wire.to_string();
        assert!(text.contains(r#"["default","gpu""#), "{dialect:?}: {text}");
    }
    // One pool, one runtime: neither field is there to fill.
    let text = arbiter_schema(&small()).to_string();
    assert!(
        !text.contains("\"pool\"") && !text.contains("\"runtime\""),
        "{text}"
    );
}

/// The offer follows the fleet: the pools and runtimes the workers that
/// answered offer, the coordinator's own among them; one of each and the
/// fields go; nothing seen, or a small profile, and the offer stays.
#[test]
fn the_pools_and_runtimes_offered_are_the_fleets() {
    let config = Config::default();
    let seen = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(p, r)| ((*p).to_owned(), (*r).to_owned()))
            .collect()
    };
    type Case<'a> = (
        &'a [(&'a str, &'a str)],
        Option<&'a [&'a str]>,
        Option<&'a [&'a str]>,
    );
    let cases: &[Case] = &[
        // (workers seen as (pool, runtime)) → (pools, runtimes) offered
        (&[], None, None),
        (
            &[("default", "native")],
            Some(&["default"]),
            Some(&["native"]),
        ),
        (
            &[
                ("gpu", "native"),
                ("default", "claude-code"),
                ("gpu", "native"),
            ],
            Some(&["default", "gpu"]),
            Some(&["claude-code", "native"]),
        ),
        // The coordinator's own pool is offered although its workers are down.
        (
            &[("review", "codex")],
            Some(&["default", "review"]),
            Some(&["codex"]),
        ),
    ];
    for &(workers, pools, runtimes) in cases {
        let offer = full().with_fleet(&config, &seen(workers));
        let owned = |l: Option<&[&str]>| l.map(|l| l.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(offer.pools, owned(pools), "{workers:?}");
        assert_eq!(offer.runtimes, owned(runtimes), "{workers:?}");
    }
    // One pool and one runtime up: a summons has neither field to fill.
    let one = arbiter_schema(&full().with_fleet(&config, &seen(&[("default", "native")])));
    let text = one.to_string();
    assert!(
        !text.contains("\"pool\"") && !text.contains("\"runtime\""),
        "{text}"
    );
    // Two pools: a third cannot be written.
    let two = arbiter_schema(&full().with_fleet(&config, &seen(&[("gpu", "native")])));
    assert!(
        parse_with::<ArbiterOutput>(
            r#"{"intent":"summon_orchestrator","message":"B.","pool":"tpu"}"#,
            &two
        )
        .is_err()
    );
    let mut small_config = Config::default();
    small_config.model.profile = Profile::Small;
    assert_eq!(
        small().with_fleet(&small_config, &seen(&[("gpu", "codex")])),
        small()
    );
}

#[test]
fn the_decision_comes_first_and_each_dialect_takes_the_form() {
    for offer in [full(), small()] {
        let schema = arbiter_schema(&offer);
        // The grammar servers: the union, each member requiring the
        // decision first (the grammar writes required fields first).
        let mut grammar = schema.clone();
        normalise(&mut grammar, Dialect::Grammar);
        let members = grammar["anyOf"].as_array().unwrap();
        for member in members {
            let required = member["required"].as_array().unwrap();
            assert_eq!(
                required[..2],
                [json!("intent"), json!("message")],
                "{member}"
            );
            assert!(required.len() <= 3, "{member}");
        }
        // The strict APIs: one flat object, within their rules.
        for dialect in [Dialect::Anthropic, Dialect::OpenAiStrict] {
            let mut wire = schema.clone();
            normalise(&mut wire, dialect);
            assert_eq!(
                violations(&wire, dialect),
                Vec::<String>::new(),
                "{dialect:?}"
            );
            assert_eq!(wire["type"], "object");
        }
    }
    // The small profile's members carry the decision and nothing else.
    let small = arbiter_schema(&small());
    let most = small["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["properties"].as_object().unwrap().len())
        .max();
    assert_eq!(most, Some(2), "{small}");
    assert_eq!(small["anyOf"].as_array().unwrap().len(), 5);
}
