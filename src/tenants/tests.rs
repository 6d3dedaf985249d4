use super::*;
use crate::model::{Target, TargetPolicy};

const KEY: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn tenants(edit: impl FnOnce(&mut TenantTable)) -> Tenants {
    let mut table = TenantTable {
        name: Some("alpha".into()),
        keys: vec![KEY.into()],
        ..TenantTable::default()
    };
    edit(&mut table);
    Tenants::new(&specs(&[table], &[]).unwrap(), ["tenant-0011".to_owned()])
}

fn turnstile() -> SolveRequest {
    SolveRequest::new(crate::model::TaskParams::declared_of(
        crate::model::Kind::Turnstile,
        &[("sitekey", "0x4AAA"), ("pageurl", "https://example.com/")],
    ))
}

#[test]
fn max_concurrent_counts_running_solves_and_frees_on_drop() {
    let t = tenants(|t| t.max_concurrent = Some(2));
    let a = t.admit("alpha", &mut turnstile()).unwrap();
    let _b = t.admit("alpha", &mut turnstile()).unwrap();
    assert_eq!(
        t.admit("alpha", &mut turnstile()).unwrap_err(),
        Refusal::MaxConcurrent { limit: 2 }
    );
    drop(a);
    let _c = t.admit("alpha", &mut turnstile()).expect("a slot freed");
    let usage = t.usage("alpha");
    assert_eq!(usage.in_flight, 2);
    assert_eq!(usage.admitted_total, 3);
    assert_eq!(usage.refused_total.max_concurrent, 1);
    // A refusal for concurrency spends none of the hour's budget.
    assert_eq!(usage.solves_last_hour, 3);
}

#[test]
fn the_hourly_budget_refuses_with_a_wait() {
    let t = tenants(|t| t.max_solves_per_hour = Some(1));
    drop(t.admit_at("alpha", &mut turnstile(), 7_200).unwrap());
    match t.admit_at("alpha", &mut turnstile(), 7_260) {
        Err(Refusal::MaxSolvesPerHour {
            limit: 1,
            retry_after_s,
        }) => assert_eq!(retry_after_s, 3_540),
        other => panic!("expected the hourly limit, got {other:?}"),
    }
    assert!(t.admit_at("alpha", &mut turnstile(), 10_800).is_ok());
}

#[test]
fn refusals_by_a_limit_on_use_are_demand_and_a_kind_not_allowed_is_not() {
    let t = tenants(|t| {
        t.max_concurrent = Some(1);
        t.kinds = Some(vec!["turnstile".into()]);
    });
    let _held = t.admit("alpha", &mut turnstile()).unwrap();
    for _ in 0..3 {
        assert!(t.admit("alpha", &mut turnstile()).is_err());
    }
    let mut image = SolveRequest::new(crate::model::TaskParams::declared_of(
        crate::model::Kind::Image,
        &[("body", "cG5n")],
    ));
    assert!(t.admit("alpha", &mut image).is_err());
    assert_eq!(t.refused_by_limits(), 3);
}

#[test]
fn disallowed_kinds_are_refused_by_name() {
    let t = tenants(|t| t.kinds = Some(vec!["recaptcha_v2".into()]));
    let refusal = t.admit("alpha", &mut turnstile()).unwrap_err();
    assert!(refusal.message().contains("turnstile"), "{refusal:?}");
    assert!(refusal.message().contains("recaptcha_v2"));
    assert_eq!(t.usage("alpha").in_flight, 0);
}

#[test]
fn unlimited_tenants_are_never_refused_but_counted() {
    let t = tenants(|_| {});
    let passes: Vec<_> = (0..50)
        .map(|_| t.admit("tenant-0011", &mut turnstile()).unwrap())
        .collect();
    assert_eq!(t.usage("tenant-0011").in_flight, 50);
    assert!(t.usage("tenant-0011").limits.is_none());
    drop(passes);
    assert_eq!(t.usage("tenant-0011").in_flight, 0);
    assert_eq!(t.usage("tenant-0011").solves_last_hour, 50);
    // Names nobody configured share the open entry: the set of entries never grows.
    drop(t.admit("tenant-ffff", &mut turnstile()).unwrap());
    assert_eq!(t.usage("anything").tenant, OPEN_TENANT);
    assert_eq!(t.all_usage().len(), 3);
}

#[test]
fn an_isolated_tenant_has_targets_of_its_own() {
    let shared = tenants(|_| {});
    let isolated = tenants(|t| t.pools = Some("isolated".into()));
    let (mut a, mut b) = (turnstile(), turnstile());
    let _pa = shared.admit("alpha", &mut a).unwrap();
    let _pb = isolated.admit("alpha", &mut b).unwrap();
    let p = TargetPolicy::default();
    assert_eq!(Target::of(&a, p), Target::of(&turnstile(), p));
    assert_ne!(Target::of(&b, p), Target::of(&turnstile(), p));
    assert!(!format!("{:?}", Target::of(&b, p)).contains(KEY));
}

#[test]
fn metrics_label_tenants_by_name_only() {
    let t = std::sync::Arc::new(tenants(|t| t.max_concurrent = Some(1)));
    let _held = t.admit("alpha", &mut turnstile()).unwrap();
    let _ = t.admit("alpha", &mut turnstile());
    let mut registry = crate::telemetry::Metrics::new();
    metrics::register(t.clone(), registry.registry());
    let text = futures::executor::block_on(registry.render());
    assert!(text.ends_with("# EOF\n") && text.matches("# EOF").count() == 1);
    assert!(text.contains(
        "captcha_gateway_tenant_requests_total{tenant=\"alpha\",result=\"max_concurrent\"} 1"
    ));
    assert!(text.contains("captcha_gateway_tenant_in_flight{tenant=\"alpha\"} 1"));
    assert!(!text.contains(KEY));
}
