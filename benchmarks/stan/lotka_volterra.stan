
functions {
  vector dz_dt(real t, vector z, array[] real theta) {
    return [(theta[1] - theta[2] * z[2]) * z[1],
            (-theta[3] + theta[4] * z[1]) * z[2]]';
  }
}
data {
  int<lower=0> N;
  array[N] real ts;
  array[2] real y_init;
  array[N, 2] real<lower=0> y;
}
parameters {
  array[4] real<lower=0> theta;
  array[2] real<lower=0> z_init;
  array[2] real<lower=0> sigma;
}
transformed parameters {
  array[N] vector[2] z = ode_rk45_tol(dz_dt, to_vector(z_init), 0, ts,
                                      1e-5, 1e-3, 500, theta);
}
model {
  theta[{1, 3}] ~ normal(1, 0.5);
  theta[{2, 4}] ~ normal(0.05, 0.05);
  sigma ~ lognormal(-1, 1);
  z_init ~ lognormal(log(10), 1);
  for (k in 1:2) {
    y_init[k] ~ lognormal(log(z_init[k]), sigma[k]);
    y[:, k] ~ lognormal(log(z[:, k]), sigma[k]);
  }
}
