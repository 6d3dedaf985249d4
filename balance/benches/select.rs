//! Micro-benchmark of the balancer's hot path: one `pick` and its `finish`, per strategy, over
//! fleets of 3, 16 and 128 instances. Run with
//! `cargo bench -p captcha-gateway-balance --bench select`.
//!
//! The fleet is busy (four calls held out per instance) while it runs: on an idle fleet
//! least-outstanding stops at the first idle instance and would look cheaper than it is.

use std::hint::black_box;
use std::time::Instant;

use captcha_gateway_balance::{Balancer, EjectionPolicy, Outcome, Strategy};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn pick_finish(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_finish");
    for (name, strategy) in [
        ("least_outstanding", Strategy::LeastOutstanding),
        ("power_of_two_choices", Strategy::PowerOfTwoChoices),
    ] {
        for size in [3usize, 16, 128] {
            let now = Instant::now();
            let mut balancer = Balancer::new(strategy, EjectionPolicy::default(), 1);
            for i in 0..size {
                balancer.add(&format!("10.0.{}.{}:8080", i / 256, i % 256));
            }
            let held: Vec<_> = (0..size * 4).map(|_| balancer.pick(now)).collect();
            group.bench_with_input(BenchmarkId::new(name, size), &size, |b, _| {
                b.iter(|| {
                    let ticket = balancer.pick(black_box(now)).expect("instances");
                    balancer.finish(ticket, Outcome::Success, now);
                })
            });
            drop(held);
        }
    }
    group.finish();
}

criterion_group!(benches, pick_finish);
criterion_main!(benches);
