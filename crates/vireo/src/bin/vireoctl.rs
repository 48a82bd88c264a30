//! `vireoctl`: the command-line client of `vireod`. See `vireo::ctl`.
fn main() {
    vireo::ctl::main()
}
