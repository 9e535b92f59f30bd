//! Project automation (`cargo xtask ...`).

fn main() {
    eprintln!("usage: cargo xtask <ci|bench>");
    std::process::exit(2);
}
