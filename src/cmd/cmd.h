/*
 * cmd.h - subcommands of the inferd binary. Each takes the arguments after
 * its own name (argv[0] is the subcommand name) and returns the process exit
 * status: 0 ok, 1 failure (message already printed), 2 usage error
 * (CMD_EXIT_* in cmd/opt.h). Each parses its options from a table of its own
 * with cmd_opt_parse, so every subcommand has --help, accepts "--" and
 * reports bad options alike.
 */
#ifndef INFERD_CMD_H
#define INFERD_CMD_H

int cmd_run(int argc, char **argv);
int cmd_grammar(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench_engine(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_mock(int argc, char **argv);
int cmd_model_info(int argc, char **argv);
int cmd_model_make(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_sim_cluster(int argc, char **argv); /* inferd sim --trace ... (cmd_sim_cluster.c) */
int cmd_kv(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_gateway(int argc, char **argv);

#endif
