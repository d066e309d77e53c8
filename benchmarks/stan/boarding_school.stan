
functions {
  vector sir(real t, vector y, real beta, real gamma, int N) {
    real infection = beta * y[2] * y[1] / N;
    real recovery = gamma * y[2];
    return [-infection, infection - recovery, recovery]';
  }
}
data {
  int<lower=1> n_days;
  vector[3] y0;
  real t0;
  array[n_days] real ts;
  int N;
  array[n_days] int cases;
}
parameters {
  real<lower=0> gamma;
  real<lower=0> beta;
  real<lower=0> phi_inv;
}
transformed parameters {
  array[n_days] vector[3] y = ode_rk45_tol(sir, y0, t0, ts, 1e-6, 1e-6, 1000000,
                                           beta, gamma, N);
  real phi = 1. / phi_inv;
}
model {
  beta ~ normal(2, 1);
  gamma ~ normal(0.4, 0.5);
  phi_inv ~ exponential(5);
  cases ~ neg_binomial_2(y[:, 2], phi);
}
generated quantities {
  real R0 = beta / gamma;
  real recovery_time = 1 / gamma;
  array[n_days] int pred_cases = neg_binomial_2_rng(y[:, 2], phi);
}
