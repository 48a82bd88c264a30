//! `vireod`: the switch daemon. See `vireo::daemon`.
fn main() {
    std::process::exit(vireo::daemon::main())
}
