
functions {
  vector pk(real t, vector y, vector theta) {
    real ka = theta[1];
    real V = theta[2];
    real vmax = theta[3];
    real km = theta[4];
    return [-ka * y[1], ka * y[1] / V - vmax * y[2] / (V * (km + y[2]))]';
  }
}
data {
  int<lower=1> n;
  array[n] real ts;
  vector[n] obs;
  real dose;
  vector[4] prior_means;
  vector[4] prior_sds;
  real rtol;
  real atol;
  int max_num_steps;
}
parameters {
  vector[4] log_theta;
  real<lower=0> sigma;
}
model {
  vector[4] theta = exp(log_theta);
  array[n] vector[2] y = ode_bdf_tol(pk, [dose, 0]', 0.0, ts, rtol, atol,
                                     max_num_steps, theta);
  log_theta ~ normal(prior_means, prior_sds);
  sigma ~ normal(0, 1);
  for (i in 1:n) obs[i] ~ normal(y[i][2], sigma);
}
